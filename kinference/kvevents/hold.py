"""A live batch held back, briefly, while its worker has a request awaiting its first token.

An engine publishes the KV events of the step that made a request's first token as that
step ends, and the token reaches the gateway a moment later through its HTTP response. On
Dynamo's mockers the batch of a document's prefill (336 blocks, ~12.5 KB) was decoded and
applied on the gateway's loop 0.9-1.5 ms before the token was read, busy 0.3-1.2 ms, and
the token waited behind it (docs/benchmarks.md, h147). So a batch taken from the socket
with nothing behind it, from a worker where a request this replica routed has not had its
first token yet, waits until one of those has (the caller reported it: `PoolCaches.started`
marks it running) or left the worker, or `HOLD_S` passed, whichever comes first; then it
is decoded and applied as before.

Bounded, in order, nothing lost: the feed reads its next message only after this one is
handled (a hold stops the feed, not the socket, which queues what comes meanwhile); a batch
with another waiting behind it is not held, so under a flood the feed runs as before and a
batch waits at most `HOLD_S` beyond the handling of those ahead of it. The batch's arrival
is stamped when it was taken, so the worker's lag and gap detection (`kvevents.trust`) see
it as they did. Meanwhile what was routed to the worker and not stored yet counts as
pending there (`kvcache.pending`): a Pick in between finds it as it would after the batch.
"""

from __future__ import annotations

import asyncio

from kinference.kvcache.pool import PoolCaches
from kinference.kvcache.queue import Queued

# The longest a batch waits for a first token: the token came 0.1-1.5 ms after its batch
# began on Dynamo's mockers (h147). And how often the wait looks whether one came (a
# millisecond: the loop's timers are no finer, and the token's read is not delayed by it).
HOLD_S = 0.003
POLL_S = 0.001


def awaiting(pool: PoolCaches, slot: int) -> list[tuple[int, Queued]]:
    """The requests routed to `slot` by this replica that have not had their first token."""
    queue = pool.queues.get(slot)
    if queue is None:
        return []
    return [(key, request) for key, request in queue.requests.items() if not request.running]


def came(pool: PoolCaches, slot: int, waiting: list[tuple[int, Queued]]) -> bool:
    """Whether one of `waiting` had its first token since, or left the worker."""
    queue = pool.queues.get(slot)
    if queue is None:
        return True
    requests = queue.requests
    return any(request.running or requests.get(key) is not request for key, request in waiting)


async def hold(pool: PoolCaches, slot: int, limit_s: float | None = None) -> float:
    """Waits while a request on `slot` awaits its first token, at most `limit_s` (by
    default `HOLD_S`); answers the seconds waited (0.0 when none awaits one)."""
    limit = HOLD_S if limit_s is None else limit_s
    waiting = awaiting(pool, slot) if limit > 0.0 else []
    if not waiting:
        return 0.0
    loop = asyncio.get_running_loop()
    start = loop.time()
    deadline = start + limit
    while (left := deadline - loop.time()) > 0.0:
        await asyncio.sleep(min(POLL_S, left))
        if came(pool, slot, waiting):
            break
    return loop.time() - start

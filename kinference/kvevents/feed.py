"""One endpoint's subscription (`kvevents.subscriber`): where its events come from, the
worker's trust, the live batches held while a replay runs (bounded: more are dropped, a
gap seen once the replay ends), and the wait of a live batch for a first token.

An engine publishes the KV events of the step that made a request's first token as that
step ends, and the token reaches the gateway a moment later through its HTTP response. On
Dynamo's mockers the batch of a document's prefill (336 blocks, ~12.5 KB) was decoded and
applied on the gateway's loop 0.9-1.5 ms before the token was read, busy 0.3-1.2 ms, and
the token waited behind it (docs/benchmarks.md, h147). So a live batch with nothing behind
it in the socket, from a worker where a request this replica routed has not had its first
token yet, waits (`Feed.first_token`) until one of those has it (the caller reported it:
`PoolCaches.started` marks it running) or left the worker, or `FIRST_TOKEN_WAIT_S` passed,
whichever comes first; then it is decoded and applied as before.

Bounded, in order, nothing lost: the feed reads its next message only after this one is
handled (the wait stops the feed, not the socket, which queues what comes meanwhile); a
batch with another behind it does not wait, so under a flood the feed runs as before, and
a batch waits at most the bound (and a loop turn) beyond the handling of those ahead of it.
Sequence gaps are judged as before; a batch that waited is stamped as it is handled, and as
none was behind it, it only re-bases the worker's lag measure (`WorkerTrust.arrived`), by
at most the wait. Meanwhile what was routed to the worker and not stored yet counts as
pending there (`kvcache.pending`): a Pick in between finds it as it would after the batch.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from kinference.kvcache.pool import PoolCaches
from kinference.kvcache.queue import Queued
from kinference.kvevents.events import EventBatch
from kinference.kvevents.trust import WorkerTrust

# A held batch: decoded (None: malformed), or a replayed one's payload, decoded when applied.
Held = EventBatch | bytes | None
# Live batches held while a replay runs, and their payloads' bytes. Decoded, a 1 MiB
# prompt's step holds ~1.5 MB of token ids.
MAX_PENDING = 10_000
MAX_PENDING_BYTES = 256 * 1024 * 1024
# The longest a live batch waits for a first token: the token came 0.1-1.5 ms after its
# batch began on Dynamo's mockers (h147). And how often the wait looks whether one came (a
# millisecond: the loop's timers are no finer; the token's read is not delayed by it).
FIRST_TOKEN_WAIT_S = 0.003
FIRST_TOKEN_POLL_S = 0.001


@dataclass
class Feed:
    """One endpoint's subscription."""

    pool: PoolCaches
    slot: int
    endpoint: str
    address: str
    replay_address: str | None
    topic: bytes
    trust: WorkerTrust
    pending: deque[tuple[int, Held]] = field(default_factory=deque)  # taken from the front
    pending_bytes: int = 0  # their payloads'
    warned: bool = False  # a malformed message was logged since the last good one
    replaying: bool = False
    batches: int = 0
    reconnects: int = 0  # connections ZMQ lost and reconnects by itself (`kvevents.link`)
    reopens: int = 0  # and those it gave up on: the socket reopened
    task: asyncio.Task[None] | None = None
    replay: asyncio.Task[None] | None = None

    def cancel(self) -> None:
        """Stop reading, and replaying."""
        for task in (self.task, self.replay):
            if task is not None:
                task.cancel()

    def dropped(self) -> None:
        """ZMQ gave up on the live connection (`kvevents.link`): reopened after a wait."""
        self.trust.drop()
        self.reopens += 1

    def hold(self, seq: int, batch: EventBatch | None, size: int) -> None:
        """A live batch (its payload `size` bytes) taken while a replay runs, if it fits."""
        if len(self.pending) < MAX_PENDING and self.pending_bytes + size <= MAX_PENDING_BYTES:
            self.pending.append((seq, batch))
            self.pending_bytes += size

    async def first_token(self, limit_s: float | None = None) -> float:
        """Waits while a request routed to the worker awaits its first token, at most
        `limit_s` (by default `FIRST_TOKEN_WAIT_S`); answers the seconds waited (0.0 when
        none awaits one)."""
        limit = FIRST_TOKEN_WAIT_S if limit_s is None else limit_s
        waiting = _awaiting(self.pool, self.slot) if limit > 0.0 else []
        if not waiting:
            return 0.0
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = start + limit
        while (left := deadline - loop.time()) > 0.0:
            await asyncio.sleep(min(FIRST_TOKEN_POLL_S, left))
            if _came(self.pool, self.slot, waiting):
                break
        return loop.time() - start


def _awaiting(pool: PoolCaches, slot: int) -> list[tuple[int, Queued]]:
    """The requests routed to `slot` by this replica that have not had their first token."""
    queue = pool.queues.get(slot)
    if queue is None:
        return []
    return [(key, request) for key, request in queue.requests.items() if not request.running]


def _came(pool: PoolCaches, slot: int, waiting: list[tuple[int, Queued]]) -> bool:
    """Whether one of `waiting` had its first token since, or left the worker."""
    queue = pool.queues.get(slot)
    if queue is None:
        return True
    requests = queue.requests
    return any(request.running or requests.get(key) is not request for key, request in waiting)

"""Whether a request sent to a worker now fits in its KV cache beside the requests ahead.

An engine runs a request only when all its blocks (its prompt's, cached or computed, and
the output blocks it adds) fit in its KV cache beside those of the requests it runs
already; blocks two requests share count once (the prefix cache). Long prompts on small
caches make that, not the batch limit, the engine's bound: a request that does not fit
waits for the ones ahead to end, seconds of decoding, however many batch slots are free.
In a precise pool the model knows each worker's requests in flight and their blocks
(`kvcache.queue`) and, once some engine evicted, the cache's size (`PoolCaches.capacity`),
so it can say how many of the requests ahead must end before this one fits (they end in
the order they came) and how many then run at once: the TTFT model waits for them as it
waits for batch slots (`routing.scorers.ttft`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kinference.kvcache.blocks import BlockId
from kinference.kvcache.queue import EngineQueue


@dataclass(frozen=True, slots=True)
class Room:
    """Requests ahead that must end before a request fits, and how many requests (it
    included) then run at once on the worker."""

    ahead: int = 0
    batch: int = 1


FITS = Room()


def room(
    queue: EngineQueue | None, capacity: int | None, blocks: Sequence[BlockId], extra: int
) -> Room:
    """`blocks`: the prompt's named blocks, `extra` its other blocks (unnamed, output)."""
    if queue is None or capacity is None or not queue.requests:
        return FITS
    requests = list(queue.requests.values())
    if queue.work() + len(blocks) + extra <= capacity:  # fits even counting shared twice
        return Room(0, len(requests) + 1)
    # From the newest request back: the blocks of this one and the requests after index i.
    held: set[BlockId] = set(blocks)
    other = extra
    if len(held) + other > capacity:  # alone it fills the cache: after all of them
        return Room(len(requests), 1)
    for i in range(len(requests) - 1, -1, -1):
        request = requests[i]
        held.update(request.blocks)
        other += request.unnamed + request.decode
        if len(held) + other > capacity:  # requests 0..i must end first
            return Room(i + 1, len(requests) - i)
    return Room(0, len(requests) + 1)

"""What a worker will still hold when a request sent there now is scheduled.

A block cached at Pick may be evicted before the request runs: under load its engine queues
it for seconds while other requests' blocks push the least recently used ones out. Engines
evict least recently used blocks first, so from the events alone:

- each block's last known use (`touched`): when it was stored, or when a request matching
  it was routed here;
- the worker's eviction age: how long ago the blocks it evicts were last used (an average
  over its `BlockRemoved` events), i.e. how long an unused block survives there now;
- the worker's queue wait: how long the oldest request routed here has waited for its
  first new block to be stored (requests queue before they prefill).

A block last used `a` seconds ago survives if `a + wait < eviction age`; a prefix's blocks
were last used together (a request uses all of its prefix), so the surviving part of a
match is found by a binary search. A worker that has evicted nothing lately keeps all.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from kinference.kvcache.blocks import BlockId

_WEIGHT = 0.2  # of each eviction batch in the eviction age's moving average
MAX_WAITING = 4096  # requests tracked per worker for the queue wait


@dataclass
class WorkerAges:
    """One worker's block ages, eviction age and queue wait; times in monotonic seconds."""

    touched: dict[BlockId, float] = field(default_factory=dict)
    eviction_age_s: float | None = None
    evicted_at: float = 0.0
    # (routed at, first block it must store), oldest first: requests not yet prefilled.
    waiting: collections.deque[tuple[float, BlockId]] = field(default_factory=collections.deque)

    def touch(self, blocks: Sequence[BlockId], now: float) -> None:
        self.touched.update(dict.fromkeys(blocks, now))  # C speed: 16k blocks for 1 MiB

    def removed(self, blocks: Sequence[BlockId], now: float) -> None:
        used = map(self.touched.pop, blocks, itertools.repeat(None))  # in C
        ages = sorted(now - t for t in used if t is not None)
        if not ages:
            return
        age = ages[len(ages) // 2]
        previous = self.eviction_age_s
        self.eviction_age_s = age if previous is None else previous + _WEIGHT * (age - previous)
        self.evicted_at = now

    def routed(self, first_new: BlockId | None, now: float) -> None:
        if first_new is not None:
            self.waiting.append((now, first_new))
            if len(self.waiting) > MAX_WAITING:
                self.waiting.popleft()

    def wait_s(self, pending: dict[BlockId, float], now: float, ttl_s: float) -> float:
        """The oldest routed request's wait for its first new block (0 with none waiting)."""
        while self.waiting:
            routed, block = self.waiting[0]
            if block in pending and now - routed <= ttl_s:
                return now - routed
            self.waiting.popleft()
        return 0.0

    def surviving(self, blocks: Sequence[BlockId], depth: int, now: float, wait_s: float) -> int:
        """How many of the first `depth` blocks will still be held after `wait_s`."""
        limit = self.eviction_age_s
        if limit is None or depth == 0 or now - self.evicted_at > limit + wait_s:
            return depth  # not evicting lately: the cache is not full
        if self._survives(blocks[depth - 1], now, wait_s, limit):
            return depth
        lo, hi = 0, depth - 1  # blocks[:lo] survive; blocks[hi] does not
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._survives(blocks[mid - 1], now, wait_s, limit):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _survives(self, block: BlockId, now: float, wait_s: float, limit: float) -> bool:
        used = self.touched.get(block)
        return used is None or now - used + wait_s < limit

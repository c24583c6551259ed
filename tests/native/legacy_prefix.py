"""The prefix index as it was before its block store (`kinference.routing.prefix_store`)
was split out and written in C: the oracle the property tests hold both stores to, copied
verbatim from main 2026-12-05 (only the class renamed; since h103 a shortfall keeps
the blocks, which the reporting request prefilled again, and drops the capacity to the
age at once; since h150 an age counts distinct blocks, not blocks recorded)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from kinference.routing.prefix_store import MAX_WALK


class LegacyPrefixIndex:
    """Block hashes per worker slot (LRU-bounded) and the reverse map for matching.

    Eviction-aware: each worker's LRU is bounded by the smaller of `blocks_per_worker` and
    the capacity it was seen to have. When a worker reports fewer cached tokens than the
    index predicted (`shortfall`), the blocks it no longer had leave its entry, and its
    capacity is taken as the age (blocks recorded on it since) of the first missing block;
    a hit on an older block raises the estimate again (`confirmed`).

    A Pick's own record may wait (`record_later`) until its answer is on its way: it is
    applied at `flush`, or first thing in any other call, so every caller sees the index
    eager recording would have left (~40-90 µs of a 48 KB Pick, off the gateway's hop).
    """

    def __init__(self, blocks_per_worker: int) -> None:
        self.blocks_per_worker = blocks_per_worker
        # block -> slots holding it: tuples of ints, which the garbage collector stops
        # tracking (a set per block made every full collection walk the whole index:
        # 20-30 ms at ~70k blocks, on the event loop's thread).
        self._holders: dict[int, tuple[int, ...]] = {}
        self._lru: dict[int, OrderedDict[int, int]] = {}  # slot -> block -> touch number
        self._touches: dict[int, int] = {}  # slot -> blocks recorded on it so far
        self.capacity: dict[int, int] = {}  # slot -> estimated blocks it really keeps
        self._last: dict[int, Sequence[int]] = {}  # slot -> the blocks it recorded last
        # The last `match` (its hashes object, the index version, the answer), which `held`
        # reuses at the same Pick; the version counts every change of who holds what.
        self._version = 0
        self._matched: tuple[Sequence[int], int, dict[int, int]] | None = None
        self._later: list[tuple[int, Sequence[int]]] = []  # records not applied yet

    def __len__(self) -> int:
        """Distinct blocks indexed."""
        self.flush()
        return len(self._holders)

    def record_later(self, slot: int, hashes: Sequence[int]) -> None:
        """`record`, applied at the next `flush` (or call of any other method)."""
        self._later.append((slot, hashes))

    def flush(self) -> None:
        """Apply the records that wait, in order."""
        while self._later:
            later, self._later = self._later, []
            for slot, hashes in later:
                self._record(slot, hashes)

    def footprint(self, slots: npt.NDArray[np.intp]) -> list[float]:
        """Blocks held per slot: how full each worker's cache is, as far as we know."""
        self.flush()
        lru = self._lru
        return [float(len(lru.get(slot, ()))) for slot in slots.tolist()]

    def match(self, hashes: Sequence[int]) -> dict[int, int]:
        """Worker slot -> number of leading blocks of `hashes` it holds (only slots with > 0).

        Blocks are recorded together and the earliest ones refreshed last, so a worker
        holding block i holds blocks 0..i: a binary search per worker finds its longest
        prefix in O(log n) lookups instead of walking every block.
        """
        self.flush()
        if not hashes:
            return {}
        first = self._holders.get(hashes[0])
        if not first:
            return {}
        matched = {slot: self._longest(slot, hashes) for slot in first}
        self._matched = (hashes, self._version, matched)
        return matched

    def _longest(self, slot: int, hashes: Sequence[int]) -> int:
        lo, hi = 1, len(hashes)  # slot holds hashes[:lo]; find the largest such lo
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if slot in self._holders.get(hashes[mid - 1], ()):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def record(self, slot: int, hashes: Sequence[int]) -> None:
        """Remember that `slot` now caches these blocks (most recent: the earliest).

        The same blocks recorded again right after themselves (a retry, the same prompt
        twice in a row; the hasher hands back one tuple for one prefix) change nothing: they
        are already the most recent, in order, and push nothing else further back."""
        self.flush()
        self._record(slot, hashes)

    def _record(self, slot: int, hashes: Sequence[int]) -> None:
        if hashes and self._last.get(slot) is hashes:
            return
        self._last[slot] = hashes
        self._version += 1
        lru = self._lru.setdefault(slot, OrderedDict())
        touch = before = self._touches.get(slot, 0)
        holders, refresh = self._holders, lru.move_to_end  # ~750 steps at 48 KB: no lookups
        for touch, block in enumerate(reversed(hashes), before + 1):
            if block in lru:
                refresh(block)
            else:
                holders[block] = (*holders.get(block, ()), slot)
            lru[block] = touch
        self._touches[slot] = touch
        self._trim(slot, lru)

    def _trim(self, slot: int, lru: OrderedDict[int, int]) -> None:
        bound = min(self.blocks_per_worker, self.capacity.get(slot, self.blocks_per_worker))
        while len(lru) > bound:
            evicted, _ = lru.popitem(last=False)
            self._drop_holder(evicted, slot)

    def _drop_holder(self, block: int, slot: int) -> None:
        holders = self._holders.get(block)
        if holders is None or slot not in holders:
            return
        rest = tuple(other for other in holders if other != slot)
        if rest:
            self._holders[block] = rest
        else:
            del self._holders[block]

    def held(self, slot: int, hashes: Sequence[int]) -> tuple[int, int | None]:
        """(leading blocks of `hashes` that `slot` holds, blocks recorded on it since the
        deepest of them was): read at Pick, before the pick refreshes them."""
        self.flush()
        lru = self._lru.get(slot)
        if not hashes or lru is None or hashes[0] not in lru:
            return 0, None
        memo = self._matched
        if memo is not None and memo[0] is hashes and memo[1] == self._version:
            blocks = memo[2].get(slot, 0)  # what `match` found at this Pick
        else:
            blocks = self._longest(slot, hashes)
        deepest = hashes[blocks - 1]  # its age: distinct blocks more recent (h150)
        more_recent = list(lru)[::-1][:MAX_WALK]
        if deepest in more_recent:
            return blocks, more_recent.index(deepest)
        return blocks, min(self._touches.get(slot, 0) - lru[deepest], len(lru) - 1)

    def shortfall(self, slot: int, hashes: Sequence[int], kept: int, age: int | None) -> None:
        """`slot` had only the first `kept` blocks of `hashes` cached although the index
        said more, the deepest predicted block being `age` blocks old at the pick; the
        request prefilled them again, so they stay (h101). When it kept less than half,
        its capacity estimate drops to that age at once (h103), never below the prompt's."""
        self.flush()
        lru = self._lru.get(slot)
        if lru is None or kept >= len(hashes):
            return
        held = sum(1 for block in hashes if block in lru)
        if age is not None and kept < held / 2:
            floor = max(len(hashes), 1)  # never below one prompt's worth
            known = self.capacity.get(slot, self.blocks_per_worker)
            self.capacity[slot] = max(min(known, age), floor)
            self._last.pop(slot, None)
            self._version += 1
            self._trim(slot, lru)

    def confirmed(self, slot: int, age: int | None) -> None:
        """`slot` had the predicted blocks cached, the deepest `age` blocks old at the
        pick: a capacity estimate below that age was too small."""
        self.flush()
        known = self.capacity.get(slot)
        if known is not None and age is not None and age > known:
            self.capacity[slot] = age

    def forget(self, slot: int) -> None:
        """Drop everything a worker held (it left the pool or restarted)."""
        self.flush()
        for block in self._lru.pop(slot, OrderedDict()):
            self._drop_holder(block, slot)
        self._last.pop(slot, None)
        self._version += 1
        self._touches.pop(slot, None)
        self.capacity.pop(slot, None)

"""The prefix index's per-block part: which slots hold which block hashes, in LRU order.

`PrefixIndex` (`kinference.routing.prefix`) keeps the bookkeeping (capacity estimates, the
version, the deferred records); a store keeps the blocks. Two stores behave alike:
`PyPrefixStore` below, the reference, and `kinference.native._prefix.PrefixStore`, the same
in C (~60-75 µs of event-loop CPU a Pick less, docs/benchmarks.md), built by `setup.py`
where a compiler is found. `new_store` is the one place that chooses.

A store keeps, per slot, its blocks in LRU order with a touch number each (blocks recorded
on that slot so far when the block was last recorded), and per block the slots that hold
it, in the order they took it. Block hashes are integers in [0, 2**64) (`routing.blocks`,
the cluster's codec); the native store refuses others in `record` and finds none.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol

# A block's age on a slot: how many distinct blocks the slot recorded since it was last
# recorded, i.e. more recent than it in its LRU (what an LRU cache of that many blocks would
# have evicted it after). Not the blocks recorded since, which count a prompt recorded again
# each time: two documents asked about in turn on one worker aged each other by a document
# a question, so an eviction between them taught a capacity of many documents (h150).
# Found by walking the LRU from its most recent end, at most `MAX_WALK` blocks; past that,
# the blocks recorded since (at most the slot's blocks), an upper bound.
MAX_WALK = 4096


class BlockStore(Protocol):
    """What `PrefixIndex` asks of its store (see `PyPrefixStore` for each method)."""

    def __len__(self) -> int: ...
    def has(self, slot: int) -> bool: ...
    def footprint(self, slots: list[int]) -> list[float]: ...
    def record(self, slot: int, hashes: Sequence[int], bound: int) -> None: ...
    def trim(self, slot: int, bound: int) -> None: ...
    def match(self, hashes: Sequence[int]) -> dict[int, int]: ...
    def held(self, slot: int, hashes: Sequence[int], known: int) -> tuple[int, int | None]: ...
    def count(self, slot: int, hashes: Sequence[int]) -> int: ...
    def forget(self, slot: int) -> None: ...


def new_store() -> BlockStore:
    """The native store when its extension was built, else the Python one."""
    try:
        from kinference.native._prefix import PrefixStore
    except ImportError:
        return PyPrefixStore()
    return PrefixStore()


class PyPrefixStore:
    """The reference store: an `OrderedDict` per slot, a tuple of holders per block."""

    def __init__(self) -> None:
        # block -> slots holding it: tuples of ints, which the garbage collector stops
        # tracking (a set per block made every full collection walk the whole index:
        # 20-30 ms at ~70k blocks, on the event loop's thread).
        self._holders: dict[int, tuple[int, ...]] = {}
        self._lru: dict[int, OrderedDict[int, int]] = {}  # slot -> block -> touch number
        self._touches: dict[int, int] = {}  # slot -> blocks recorded on it so far

    def __len__(self) -> int:
        """Distinct blocks held by any slot."""
        return len(self._holders)

    def has(self, slot: int) -> bool:
        """Whether `slot` recorded since it was last forgotten (perhaps nothing)."""
        return slot in self._lru

    def footprint(self, slots: list[int]) -> list[float]:
        """Blocks held per slot."""
        lru = self._lru
        return [float(len(lru.get(slot, ()))) for slot in slots]

    def record(self, slot: int, hashes: Sequence[int], bound: int) -> None:
        """`slot` holds `hashes`, the earliest most recent; then `trim` to `bound`."""
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
        self._trim(slot, lru, bound)

    def trim(self, slot: int, bound: int) -> None:
        """Evict `slot`'s least recent blocks until it holds at most `bound`."""
        lru = self._lru.get(slot)
        if lru is not None:
            self._trim(slot, lru, bound)

    def _trim(self, slot: int, lru: OrderedDict[int, int], bound: int) -> None:
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

    def match(self, hashes: Sequence[int]) -> dict[int, int]:
        """Slot -> leading blocks of `hashes` it holds, for the holders of the first block
        in the order they took it.

        Blocks are recorded together and the earliest ones refreshed last, so a worker
        holding block i holds blocks 0..i: a binary search per worker finds its longest
        prefix in O(log n) lookups instead of walking every block.
        """
        first = self._holders.get(hashes[0]) if hashes else None
        if not first:
            return {}
        return {slot: self._longest(slot, hashes) for slot in first}

    def _longest(self, slot: int, hashes: Sequence[int]) -> int:
        lo, hi = 1, len(hashes)  # slot holds hashes[:lo]; find the largest such lo
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if slot in self._holders.get(hashes[mid - 1], ()):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def held(self, slot: int, hashes: Sequence[int], known: int) -> tuple[int, int | None]:
        """(leading blocks of `hashes` that `slot` holds, the deepest one's age); `known`,
        when > 0, is that count as a `match` found it. The age is the distinct blocks more
        recent than it on `slot` (its LRU stack distance, `MAX_WALK`)."""
        lru = self._lru.get(slot)
        if not hashes or lru is None or hashes[0] not in lru:
            return 0, None
        blocks = known if known > 0 else self._longest(slot, hashes)
        deepest = hashes[blocks - 1]
        for rank, block in enumerate(itertools.islice(reversed(lru), MAX_WALK)):
            if block == deepest:
                return blocks, rank
        return blocks, min(self._touches.get(slot, 0) - lru[deepest], len(lru) - 1)

    def count(self, slot: int, hashes: Sequence[int]) -> int:
        """How many of `hashes` (each occurrence) `slot` holds, wherever they sit."""
        lru = self._lru.get(slot)
        if lru is None:
            return 0
        return sum(1 for block in hashes if block in lru)

    def forget(self, slot: int) -> None:
        """Drop everything `slot` held and its touch count."""
        for block in self._lru.pop(slot, OrderedDict()):
            self._drop_holder(block, slot)
        self._touches.pop(slot, None)

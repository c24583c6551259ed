"""The oracle of `kinference.kvcache.ageing`: `WorkerAges` as it was before touches re-pointed
whole runs (every touch re-keys each block it names; trial at fdb2da2), kept verbatim bar this
docstring and what it shares unchanged with the run form (its constants and `_by_touch`,
which `test_ageing.py` tests on its own). The run form must rank, count and predict
survivals exactly as this does."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kinference.kvcache.ageing import _NONE, _STRIDE, _by_touch
from kinference.kvcache.ageing import WorkerAges as RunAges
from kinference.kvcache.blocks import BlockId
from kinference.kvcache.order import _NEWEST, _PLACE_BITS, _PLACE_MASK, UNKNOWN


@dataclass
class WorkerAges:
    """One worker's held blocks in the order its engine would evict them."""

    touched: dict[BlockId, int] = field(default_factory=dict)  # block -> its last touch
    live: dict[int, int] = field(default_factory=dict)  # touch -> blocks it last touched
    evicted: dict[int, int] = field(default_factory=dict)  # touch -> of its blocks, evicted
    touches: int = 0

    def touch(self, blocks: Sequence[BlockId]) -> None:
        """`blocks` were just used (stored, or matched by a request routed here), in order:
        each is named by this touch's number and its place from the touch's last block."""
        named = dict.fromkeys(blocks)
        if not named:
            return
        self._release(map(self.touched.get, named, itertools.repeat(_NONE)), len(named))
        self.touches += 1
        base = self.touches << _PLACE_BITS
        places = range(base + len(named) - 1, base - 1, -1)
        self.touched.update(zip(named, places, strict=True))  # C speed: 16k for 1 MiB
        self.live[self.touches] = len(named)

    def removed(self, blocks: Sequence[BlockId]) -> None:
        """Evicted: from the end of their touch (engines evict tails first)."""
        self._release(map(self.touched.pop, blocks, itertools.repeat(_NONE)), len(blocks), True)

    def _release(self, keys: Iterable[int], count: int, evicted: bool = False) -> None:
        """The blocks of `keys` (`_NONE`: not held) leave their touches. In numpy: a 1 MiB
        prompt names 16k blocks, and a Python loop over them held the event loop ~3 ms
        per touch (a Pick touches its match when routed and when it ends)."""
        found = np.fromiter(keys, np.int64, count)
        leaving_by_touch = _by_touch(found[found != _NONE] >> _PLACE_BITS)
        for touch, leaving in leaving_by_touch:
            left = self.live.get(touch, 0) - leaving
            if left > 0:
                self.live[touch] = left
                if evicted:
                    self.evicted[touch] = self.evicted.get(touch, 0) + leaving
            else:
                self.live.pop(touch, None)
                self.evicted.pop(touch, None)

    def surviving(self, blocks: Sequence[BlockId], depth: int, evictions: int) -> int:
        """How many of the first `depth` blocks are still held after the worker evicts its
        `evictions` least recently used blocks."""
        if evictions <= 0 or depth == 0:
            return depth
        gone = np.flatnonzero(self.ranks(blocks[:depth]) < evictions)
        return int(gone[0]) if len(gone) else depth

    def ranks(self, blocks: Sequence[BlockId]) -> npt.NDArray[np.int64]:
        """Each block's place in the eviction order (0: evicted first): how many blocks were
        used before it (in earlier touches, or after it in its own touch, as far as that
        touch still has blocks held); `UNKNOWN` for a block not held (about to be stored:
        used last)."""
        return self.order().ranks(blocks)

    def order(self) -> Order:
        """The eviction order as it is now, to rank many blocks against."""
        return Order(self)


class Order:
    """A snapshot of a worker's eviction order (`WorkerAges.ranks`): per live touch, in
    ascending order, how many blocks were used before it and how many of it were evicted."""

    def __init__(self, ages: WorkerAges) -> None:
        self._touched = ages.touched
        self._order = np.fromiter(ages.live.keys(), np.int64, len(ages.live))
        self._counts = np.fromiter(ages.live.values(), np.int64, len(ages.live))
        self._older = np.concatenate(([0], np.cumsum(self._counts)))
        evicted = map(ages.evicted.get, self._order.tolist(), itertools.repeat(0))
        self._gone_before = np.fromiter(evicted, np.int64, len(self._order))

    def ranks(self, blocks: Sequence[BlockId]) -> npt.NDArray[np.int64]:
        count = len(blocks)
        found = map(self._touched.get, blocks, itertools.repeat(_NEWEST))
        keys = np.fromiter(found, np.int64, count)
        if not len(self._order):
            return np.full(count, UNKNOWN, dtype=np.int64)
        at = np.minimum(np.searchsorted(self._order, keys >> _PLACE_BITS), len(self._order) - 1)
        places = (keys & _PLACE_MASK) - self._gone_before[at]
        behind = np.clip(places, 0, self._counts[at] - 1)
        return np.where(keys != _NEWEST, self._older[at] + behind, UNKNOWN)


def resolved(ages: RunAges) -> dict[BlockId, int]:
    """The run form's keys as the per-block form writes them: each id re-pointed to the
    touch its blocks are in now, their places moved up by its offset, and named by the
    touch's number (a split tail's id by its touch's)."""
    keys: dict[BlockId, int] = {}
    for block, key in ages.touched.items():
        touch, offset = ages.alias.get(key >> _PLACE_BITS, (key >> _PLACE_BITS, 0))
        keys[block] = ((touch // _STRIDE) << _PLACE_BITS) + (key & _PLACE_MASK) + offset
    return keys


def numbered(counts: dict[int, int]) -> dict[int, int]:
    """The run form's `live` or `evicted` by touch number, as the per-block form keeps them
    (a split tail's under its touch's: the touch itself was re-pointed when split)."""
    by_number = {ident // _STRIDE: count for ident, count in counts.items()}
    assert len(by_number) == len(counts)
    return by_number

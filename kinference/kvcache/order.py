"""A snapshot of a worker's eviction order (`kvcache.ageing`), to rank many blocks against:
a block's key (the touch that last named it, its place from that touch's end) made its
place in the order, in numpy, for the queue replay (`kvcache.replayed`, `kvcache.replan`)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from kinference.kvcache.blocks import BlockId

if TYPE_CHECKING:
    from kinference.kvcache.ageing import WorkerAges

_NEWEST = np.iinfo(np.int64).max  # a block not held yet (about to be stored): used last
UNKNOWN = _NEWEST  # the rank of a block not held
_PLACE_BITS = 24  # a block's key: its touch's number, then its place from the touch's end
_PLACE_MASK = (1 << _PLACE_BITS) - 1


class Order:
    """A snapshot of a worker's eviction order (`WorkerAges.ranks`), per id a block's key can
    name (a live touch, or one re-pointed into one), ascending: what a block's place there
    adds up to as a rank (blocks used before its touch, less its touch's evicted tail, plus
    the id's offset), and the ranks its touch spans."""

    def __init__(self, ages: WorkerAges) -> None:
        self._touched = ages.touched
        touches = np.fromiter(ages.live.keys(), np.int64, len(ages.live))
        counts = np.fromiter(ages.live.values(), np.int64, len(ages.live))
        if len(touches) > 1 and bool((touches[1:] < touches[:-1]).any()):  # a split's tail
            by_age = np.argsort(touches)
            touches, counts = touches[by_age], counts[by_age]
        older = np.cumsum(counts) - counts
        evicted = map(ages.evicted.get, touches.tolist(), itertools.repeat(0))
        gone_before = np.fromiter(evicted, np.int64, len(touches))
        moved = np.fromiter(itertools.chain(*ages.alias.values()), np.int64).reshape(-1, 2)
        ids = np.concatenate((touches, np.fromiter(ages.alias.keys(), np.int64)))
        at = np.concatenate((np.arange(len(touches)), np.searchsorted(touches, moved[:, 0])))
        offsets = np.concatenate((np.zeros(len(touches), np.int64), moved[:, 1]))
        by_id = np.argsort(ids) if len(moved) else slice(None)
        self._ids, at, offsets = ids[by_id], at[by_id], offsets[by_id]
        self._first, self._last = older[at], older[at] + counts[at] - 1
        self._shift = self._first - gone_before[at] + offsets
        # The highest rank `ranks_of` gives a held block (-1: none): past it, none is kept.
        self.top = int(self._last.max()) if len(self._last) else -1

    def ranks(self, blocks: Sequence[BlockId]) -> npt.NDArray[np.int64]:
        return self.ranks_of(self.keys(blocks))

    def keys(self, blocks: Sequence[BlockId]) -> npt.NDArray[np.int64]:
        """The blocks' keys now (what `ranks_of` ranks; see `kvcache.replan`)."""
        found = map(self._touched.get, blocks, itertools.repeat(_NEWEST))
        return np.fromiter(found, np.int64, len(blocks))

    def ranks_of(self, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        if not len(self._ids):
            return np.full(len(keys), UNKNOWN, dtype=np.int64)
        # ufuncs and ndarray methods, in place: numpy's function wrappers (`np.clip`'s
        # above all) cost more than the work on a request's ~100 keys
        at = self._ids.searchsorted(keys >> _PLACE_BITS)
        np.minimum(at, len(self._ids) - 1, out=at)
        ranks: npt.NDArray[np.int64] = (keys & _PLACE_MASK) + self._shift.take(at)
        np.maximum(ranks, self._first.take(at), out=ranks)  # `np.clip`, as it computes it
        np.minimum(ranks, self._last.take(at), out=ranks)
        ranks[keys == _NEWEST] = UNKNOWN
        return ranks

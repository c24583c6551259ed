"""What a worker will still hold when a request sent there now is scheduled.

A block cached at Pick may be evicted before the request runs: engines evict least recently
used blocks, and only when they must, to make room for new ones. So, from the events and
the Picks alone:

- the worker's capacity: the most blocks it ever held at once, once it has evicted (no
  engine evicts while it has room); the pool's workers are alike, so one that has evicted
  tells the others' capacity too (`PoolCaches`);
- the room it will need before the request runs: the blocks routed there and not stored
  yet (the pending blocks of the requests ahead, which it will compute first). Past the
  capacity, that many of its least recently used blocks go;
- the order they go in: each block's last use (stored, or matched by a request routed
  there), kept as the number of the touch that last named it; blocks touched together go
  tail first (an engine frees a request's blocks from its last, as vLLM does).

A match keeps its leading blocks until the first that falls among the evicted ones.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from kinference.kvcache.blocks import BlockId

_NEWEST = np.iinfo(np.int64).max  # a block not held yet (about to be stored): used last
_PLACE_BITS = 24  # a block's key: its touch's number, then its place from the touch's end
_PLACE_MASK = (1 << _PLACE_BITS) - 1


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
        self._release(map(self.touched.get, named))
        self.touches += 1
        base = self.touches << _PLACE_BITS
        places = range(base + len(named) - 1, base - 1, -1)
        self.touched.update(zip(named, places, strict=True))  # C speed: 16k for 1 MiB
        self.live[self.touches] = len(named)

    def removed(self, blocks: Sequence[BlockId]) -> None:
        """Evicted: from the end of their touch (engines evict tails first)."""
        self._release(map(self.touched.pop, blocks, itertools.repeat(None)), evicted=True)

    def _release(self, keys: Iterable[int | None], evicted: bool = False) -> None:
        touches = (key >> _PLACE_BITS for key in keys if key is not None)
        for touch, count in collections.Counter(touches).items():
            left = self.live.get(touch, 0) - count
            if left > 0:
                self.live[touch] = left
                if evicted:
                    self.evicted[touch] = self.evicted.get(touch, 0) + count
            else:
                self.live.pop(touch, None)
                self.evicted.pop(touch, None)

    def surviving(self, blocks: Sequence[BlockId], depth: int, evictions: int) -> int:
        """How many of the first `depth` blocks are still held after the worker evicts its
        `evictions` least recently used blocks: a block goes if fewer than that many were
        used before it (in earlier touches, or after it in its own touch, as far as that
        touch still has blocks held)."""
        if evictions <= 0 or depth == 0:
            return depth
        order = np.fromiter(self.live.keys(), np.int64, len(self.live))  # ascending touches
        counts = np.fromiter(self.live.values(), np.int64, len(self.live))
        older = np.concatenate(([0], np.cumsum(counts)))
        keys = np.fromiter(
            (_NEWEST if k is None else k for k in map(self.touched.get, blocks[:depth])),
            np.int64,
            depth,
        )
        held = keys != _NEWEST  # the others are about to be stored: used last
        at = np.searchsorted(order, keys >> _PLACE_BITS)
        at = np.minimum(at, len(order) - 1) if len(order) else at
        gone_before = np.fromiter(
            map(self.evicted.get, order.tolist(), itertools.repeat(0)), np.int64
        )
        places = (keys & _PLACE_MASK) - (gone_before[at] if len(order) else 0)
        behind = np.clip(places, 0, counts[at] - 1) if len(order) else 0
        gone = np.flatnonzero(held & (older[at] + behind < evictions))
        return int(gone[0]) if len(gone) else depth

"""A worker's eviction order while its requests ahead are scheduled (`kvcache.queue`'s
replay, step by step), and what a prompt sent now finds of its match once they are."""

from __future__ import annotations

import collections
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kinference.kvcache.blocks import BlockId
from kinference.kvcache.order import UNKNOWN, Order


@dataclass
class _Replay:
    """The eviction order while the requests ahead are scheduled."""

    order: Order
    total: int  # blocks in the old order
    held: Mapping[BlockId, object]
    room: int
    evicted: int = 0  # how far eviction has gone through the old order (its places)
    # old places now used by requests ahead (sorted)
    taken: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    newer: dict[BlockId, bool] = field(default_factory=dict)  # their blocks (True), oldest first
    outputs: int = 0  # output blocks of theirs in `newer`
    exhausted: bool = False  # the old order ran out: blocks of `newer` were evicted
    gaps: npt.NDArray[np.int64] | None = None  # `_gaps`, while `taken` is as it was

    def present(
        self, blocks: Sequence[BlockId], ranks: npt.NDArray[np.int64], newer: npt.NDArray[np.bool_]
    ) -> npt.NDArray[np.bool_]:
        """Which of `blocks` (of those old `ranks`, those `newer`) are held at this point."""
        return self.kept(self.held_of(blocks), ranks, newer)

    def held_of(self, blocks: Sequence[BlockId]) -> npt.NDArray[np.bool_]:
        return np.fromiter(map(self.held.__contains__, blocks), bool, len(blocks))

    def kept(
        self,
        held: npt.NDArray[np.bool_],
        ranks: npt.NDArray[np.int64],
        newer: npt.NDArray[np.bool_],
    ) -> npt.NDArray[np.bool_]:
        """`present`, the blocks' `held` given."""
        found: npt.NDArray[np.bool_] = (held & (ranks != UNKNOWN) & (ranks >= self.evicted)) | newer
        return found

    def newer_of(self, blocks: Sequence[BlockId]) -> npt.NDArray[np.bool_]:
        return np.fromiter(map(self.newer.__contains__, blocks), bool, len(blocks))

    def use(
        self,
        blocks: Sequence[BlockId],
        ranks: npt.NDArray[np.int64],
        newer: npt.NDArray[np.bool_],
        output: int,
    ) -> None:
        """A request ahead uses `blocks` (hit or computed) and adds `output` blocks: all
        newest, freed from the output's end (its tail first); the old places of the blocks
        it hit leave the old order."""
        self.take(ranks, newer)
        self.add(blocks, output)

    def add(self, blocks: Sequence[BlockId], output: int) -> None:
        """`use` but for the old order (`take`: nothing to take once it is `past`)."""
        self.renew(blocks, output)

    def renew(self, blocks: Sequence[BlockId], output: int) -> npt.NDArray[np.bool_]:
        """`newer_of(blocks)`, then `add(blocks, output)`, in one pass over `newer`: a block
        is moved to the end by popping and re-adding it, and what the pop finds is whether
        it was there (values are True). A block named twice in `blocks` (a 2^-64 chance for
        chained identities) pops once: its later places take its first place's answer."""
        newer = self.newer
        found = np.fromiter(map(newer.pop, blocks, itertools.repeat(False)), bool, len(blocks))
        self.outputs += output  # output blocks have no name here: negative keys
        newer.update(zip(range(-self.outputs, -self.outputs + output), itertools.repeat(True)))
        size = len(newer)
        newer.update(zip(reversed(blocks), itertools.repeat(True)))
        if len(newer) - size != len(blocks):  # some block named twice (or as an output's key)
            first: dict[BlockId, int] = {}
            found = found[[first.setdefault(b, i) for i, b in enumerate(blocks)]]
        return found

    def past(self) -> bool:
        """Whether eviction went past every rank of the old order: no block is kept but
        the requests ahead's (`kept` is `newer` alone; `take` takes nothing)."""
        return self.evicted > self.order.top

    def take(self, ranks: npt.NDArray[np.int64], newer: npt.NDArray[np.bool_]) -> None:
        """The old places of blocks a request ahead hit (of those `ranks`) leave the order."""
        ranks = ranks[~newer & (ranks != UNKNOWN) & (ranks >= self.evicted)]
        if len(ranks):
            self.taken = np.sort(np.concatenate((self.taken, ranks)))
            self.gaps = None

    def _gaps(self) -> npt.NDArray[np.int64]:
        """Per taken place, the places below it not taken, counted as if none were taken
        twice (`taken - arange`). Where eviction ends, in one pass (`advance`): at the first
        taken place that leaves enough not taken below it (a place taken twice lowers its
        second's count: the first is found first)."""
        if self.gaps is None:
            self.gaps = self.taken - np.arange(len(self.taken))
        return self.gaps

    def compute(self, count: int, own: Sequence[BlockId]) -> None:
        """`count` new blocks are stored: into the room left, else evicting the oldest."""
        need = self.advance(count)
        if need > 0:  # then the blocks of the requests ahead, oldest first, not `own`
            self.exhausted = True
            keep = set(own)
            gone = list(
                itertools.islice(itertools.filterfalse(keep.__contains__, self.newer), need)
            )
            collections.deque(map(self.newer.pop, gone), maxlen=0)

    def advance(self, count: int) -> int:
        """`count` new blocks into the room left, else evicting the old order's oldest:
        how many found no place there (0: all did)."""
        fits = min(self.room, count)
        self.room -= fits
        need = count - fits
        total, taken = self.total, self.taken
        if need <= 0 or self.evicted >= total:
            return need
        below = int(taken.searchsorted(self.evicted)) if len(taken) else 0
        if len(taken):  # where the loop below ends, in one pass: past the `need`-th place
            # not taken from `evicted`, the first at or above it taken from there on
            goal = need + self.evicted - below  # its place, less the taken places below it
            ahead = np.flatnonzero(self._gaps()[below:] >= goal)
            end = goal + below + (int(ahead[0]) if len(ahead) else len(taken) - below)
            if end <= total:
                self.evicted = end
                return 0
        while need > 0 and self.evicted < total:  # skip the places requests ahead took
            end = min(self.evicted + need, total)
            at = int(taken.searchsorted(end)) if len(taken) else 0
            need -= (end - self.evicted) - (at - below)
            self.evicted, below = end, at
        return need


@dataclass(frozen=True, slots=True)
class Replayed:
    """A worker's eviction order once its requests ahead are scheduled (`replay`): what any
    prompt sent now finds of its match there. Valid while the worker's state is as it was."""

    replay: _Replay | None  # None: the requests ahead fit in the room left, nothing evicted

    def surviving(self, blocks: Sequence[BlockId], depth: int) -> int:
        """`survivors` of a prompt's leading `blocks`, `depth` of them held or pending."""
        replay = self.replay
        if depth == 0 or replay is None:
            return depth
        prefix = blocks[: depth + len(replay.newer)]  # and what the requests ahead store of it
        found = replay.newer_of(prefix)
        if not replay.past():
            found = replay.present(prefix, replay.order.ranks(prefix), found)
        gone = np.flatnonzero(~found)
        return int(gone[0]) if len(gone) else depth

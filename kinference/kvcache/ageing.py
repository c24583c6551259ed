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

import itertools
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.ma  # np.unique (np.isin calls it) imports it at first use: here, not on the loop
import numpy.typing as npt

from kinference.kvcache.blocks import BlockId
from kinference.kvcache.order import _PLACE_BITS, Order
from kinference.routing.chain import parted

_NONE = -1  # the key of a block no touch names (keys are never negative)
_MAX_RUNS = 64  # runs of one touch's blocks counted in Python; more: `np.unique`
_SMALL = 64  # blocks leaving their touches counted in Python (numpy's calls cost more)
_MIN_RUN = 16  # a touch that repeats a whole earlier touch this long re-points it
_STRIDE = 16  # a touch's id is its number times this: a split's tail takes the next id
# Ids re-pointed into one touch at most: a chain of turns past it is keyed anew once (the
# old ids then die with their touch), so a long agent session does not grow the aliases
# every ranking snapshot sorts, nor the list each re-point moves.
MAX_ALIASES = 256


@dataclass
class WorkerAges:
    """One worker's held blocks in the order its engine would evict them.

    A block's key names the touch that gave it (its id) and its place there. A touch that
    repeats whole earlier touches at its head (a chat turn's history, stored or matched
    before) re-points them instead of re-keying their blocks: `alias` maps an id to the
    touch its blocks are in now and what their places moved by. One that repeats an earlier
    touch's head only (a system prompt shared by conversations, last used by another's
    turn) splits it there first: its tail's few blocks are keyed anew, in its place."""

    touched: dict[BlockId, int] = field(default_factory=dict)  # block -> id and place
    live: dict[int, int] = field(default_factory=dict)  # touch -> blocks it last touched
    evicted: dict[int, int] = field(default_factory=dict)  # touch -> of its blocks, evicted
    touches: int = 0
    alias: dict[int, tuple[int, int]] = field(default_factory=dict)  # id -> touch, offset
    splits: int = 0  # touches split (`_split`: the only re-keying of blocks not touched)
    members: dict[int, list[int]] = field(default_factory=dict)  # touch -> ids aliased to it
    lists: dict[int, tuple[BlockId, ...]] = field(default_factory=dict)  # touch -> its blocks

    def touch(self, blocks: Sequence[BlockId]) -> None:
        """`blocks` were just used (stored, or matched by a request routed here), in order:
        each is named by this touch's number and its place from the touch's last block."""
        runs, start = self._runs(blocks)
        named: Collection[BlockId] = dict.fromkeys(blocks[start:] if start else blocks)
        if not named and not runs:
            return
        if named:
            named = self._leave(named, runs)
        self.touches += 1
        ident = self.touches * _STRIDE
        base = ident << _PLACE_BITS
        self.touched.update(zip(named, range(base + len(named) - 1, base - 1, -1), strict=True))
        offset = len(named)
        for run in reversed(runs):  # the last run's blocks sit just before the rest
            offset += self._repoint(run, ident, offset)
        self.live[ident] = offset
        if offset >= _MIN_RUN:  # what a later touch must repeat to re-point this one
            whole = offset == len(blocks)  # no block named twice: `blocks` as it is
            listed = (
                tuple(blocks)
                if whole
                else (*itertools.chain(*(self.lists[run] for run in runs)), *named)
            )
            self.lists[ident] = listed
        for run in runs:
            self.lists.pop(run, None)

    def _leave(self, named: Collection[BlockId], runs: list[int]) -> Collection[BlockId]:
        """The blocks `named` after the repeated `runs` leave their touches; those already
        in the runs (named there first) stay: the rest, to key anew."""
        found = map(self.touched.get, named, itertools.repeat(_NONE))
        if len(named) <= _SMALL:  # a chat turn's new blocks: the same, without numpy
            return self._leave_small(named, runs, list(found))
        keys = np.fromiter(found, np.int64, len(named))
        if runs:
            inside = np.isin(keys >> _PLACE_BITS, self._ids(runs))
            if inside.any():
                named = list(itertools.compress(named, (~inside).tolist()))
                keys = keys[~inside]
        self._release(keys)
        return named

    def _leave_small(
        self, named: Collection[BlockId], runs: list[int], keys: list[int]
    ) -> Collection[BlockId]:
        """`_leave` of a few blocks (`keys`: theirs), in Python."""
        if runs:
            ids = set(self._ids(runs))
            outside = [key >> _PLACE_BITS not in ids for key in keys]
            if not all(outside):
                named = list(itertools.compress(named, outside))
                keys = list(itertools.compress(keys, outside))
        self._leaving(_counted(keys))
        return named

    def _runs(self, blocks: Sequence[BlockId]) -> tuple[list[int], int]:
        """The whole earlier touches `blocks` begins with, in order (each still wholly held,
        its blocks in its order: one list comparison), and where the rest begins."""
        runs: list[int] = []
        at = 0
        while at < len(blocks):
            key = self.touched.get(blocks[at])
            if key is None:
                break
            run = self._current(key >> _PLACE_BITS)
            listed = self.lists.get(run)
            if listed is None or len(listed) < _MIN_RUN or self.live.get(run) != len(listed):
                break
            if len(self.members.get(run, ())) >= MAX_ALIASES:
                break
            if run in runs:
                break
            end = at + len(listed)
            if tuple(blocks[at:end]) != listed:  # a tuple: a no-op
                if not self._split(run, listed, _head(blocks, at, listed)):
                    break
                end = at + len(self.lists[run])
            runs.append(run)
            at = end
        return runs, at

    def _split(self, run: int, listed: tuple[BlockId, ...], head: int) -> bool:
        """The touch `run` keeps its first `head` blocks (`listed`'s); its tail, keyed anew
        under the next id, ranks where it did (the head's evicted tail: `_repoint`)."""
        tail, ident = listed[head:], run + 1
        if head < _MIN_RUN or ident % _STRIDE == 0 or ident in self.live or ident in self.alias:
            return False
        base = ident << _PLACE_BITS
        self.touched.update(zip(tail, range(base + len(tail) - 1, base - 1, -1), strict=True))
        self.live[run] = head
        self.evicted[run] = self.evicted.get(run, 0) + len(tail)
        self.lists[run] = listed[:head]
        self.live[ident] = len(tail)
        self.splits += 1
        if len(tail) >= _MIN_RUN:
            self.lists[ident] = tail
        return True

    def _current(self, ident: int) -> int:
        found = self.alias.get(ident)
        return ident if found is None else found[0]

    def _ids(self, runs: list[int]) -> list[int]:
        return [*runs, *itertools.chain(*(self.members.get(run, ()) for run in runs))]

    def _repoint(self, run: int, touch: int, offset: int) -> int:
        """The whole touch `run` joins `touch`, its places moved up by `offset` (and down
        by its evicted tail): its size."""
        offset -= self.evicted.pop(run, 0)
        ids = self.members.pop(run, [])
        for ident in ids:
            self.alias[ident] = (touch, self.alias[ident][1] + offset)
        self.alias[run] = (touch, offset)
        ids.append(run)
        self.members.setdefault(touch, []).extend(ids)
        return self.live.pop(run)

    def removed(self, blocks: Sequence[BlockId]) -> None:
        """Evicted: from the end of their touch (engines evict tails first)."""
        found = map(self.touched.pop, blocks, itertools.repeat(_NONE))
        if len(blocks) <= _SMALL:  # an engine step's few: the same, without numpy
            self._leaving(_counted(found), True)
            return
        self._release(np.fromiter(found, np.int64, len(blocks)), True)

    def _release(self, keys: npt.NDArray[np.int64], evicted: bool = False) -> None:
        """The blocks of `keys` (`_NONE`: not held) leave their touches. In numpy: a 1 MiB
        prompt names 16k blocks, and a Python loop over them held the event loop ~3 ms
        per touch (a Pick touches its match when routed and when it ends)."""
        self._leaving(_by_touch(keys[keys != _NONE] >> _PLACE_BITS), evicted)

    def _leaving(self, by_id: Iterable[tuple[int, int]], evicted: bool = False) -> None:
        """(id, how many of its blocks leave) for each id named: out of their touches."""
        leaving_by_touch: dict[int, int] = {}
        for ident, leaving in by_id:
            touch = self._current(ident)
            leaving_by_touch[touch] = leaving_by_touch.get(touch, 0) + leaving
        for touch, leaving in leaving_by_touch.items():
            self.lists.pop(touch, None)
            left = self.live.get(touch, 0) - leaving
            if left > 0:
                self.live[touch] = left
                if evicted:
                    self.evicted[touch] = self.evicted.get(touch, 0) + leaving
            else:
                self.live.pop(touch, None)
                self.evicted.pop(touch, None)
                for ident in self.members.pop(touch, ()):
                    self.alias.pop(ident, None)

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


def _head(blocks: Sequence[BlockId], at: int, listed: tuple[BlockId, ...]) -> int:
    """How many blocks from `at` are `listed`'s first (0: not shown): a binary search as if
    a block named its prefix (chained identities), then a tuple comparison makes sure."""
    head = parted(blocks, listed, 0, min(len(listed), len(blocks) - at), shift=at)
    return head if tuple(blocks[at : at + head]) == listed[:head] else 0


def _counted(keys: Iterable[int]) -> Iterable[tuple[int, int]]:
    """`_by_touch` of a few blocks' keys (`_NONE`: not held), in Python: (id, how many of
    them it gave) in the order the ids first come."""
    leaving: dict[int, int] = {}
    for key in keys:
        if key != _NONE:
            leaving[key >> _PLACE_BITS] = leaving.get(key >> _PLACE_BITS, 0) + 1
    return leaving.items()


def _by_touch(touches: npt.NDArray[np.int64]) -> Iterable[tuple[int, int]]:
    """(touch, how many of `touches` name it) for each touch named. A touch's blocks mostly
    come in runs from a few earlier touches (a prompt's leading blocks, in order): counted
    by run (no sort), unless there are many runs."""
    if not len(touches):
        return ()
    starts = np.flatnonzero(touches[1:] != touches[:-1]) + 1
    if len(starts) >= _MAX_RUNS:
        values, counts = np.unique(touches, return_counts=True)
        return zip(values.tolist(), counts.tolist(), strict=True)
    bounds = [0, *starts.tolist(), len(touches)]
    totals: dict[int, int] = {}
    starts_at, ends_at = bounds[:-1], bounds[1:]
    for touch, start, end in zip(touches[starts_at].tolist(), starts_at, ends_at, strict=True):
        totals[touch] = totals.get(touch, 0) + end - start
    return totals.items()

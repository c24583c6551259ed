"""A worker's queue replayed again after event batches, from what the last replay saw.

An event batch changes a worker's held blocks, its eviction order and its room left, so a
replay (`kvcache.queue.replay`) of before it is not the answer after it. But most of a
replay's work is naming: each request ahead's blocks looked up in the worker's ages (their
keys), in its held blocks, and among the blocks the requests before it use (`newer`). A
batch changes a block's key or whether it is held only for the blocks it names (stored or
removed), when none of them was held and touched before it is stored (then a touch re-keys
nothing else: `WorkerAges.touch` without runs), and which blocks the requests before use
only while the replay never evicts any of theirs (`_Replay.exhausted`). So a `Plan` keeps
each request's keys and masks, the batches' blocks mark the requests that name one to look
up again, and `again` replays the rest on the new order and room in numpy alone: the same
steps, the same answers (`tests/kvcache/test_queue_replays.py` compares them with a fresh
replay after random batches).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kinference.kvcache.ageing import Order
from kinference.kvcache.blocks import BlockId
from kinference.kvcache.replayed import Replayed, _Replay

# Blocks batches may name between two replays before the plan is dropped (marking the
# requests that name them costs a pass over every request's blocks, as a replay would).
MAX_NOTED = 4096


@dataclass(slots=True)
class Step:
    """One request ahead as the replay saw it: its blocks, their keys in the worker's ages,
    which were held, which a request before it used (None: past the replay's bound, counted
    as computed whole), and the blocks it adds past its named prompt (rest and output)."""

    blocks: tuple[BlockId, ...]
    keys: npt.NDArray[np.int64] | None
    held: npt.NDArray[np.bool_] | None
    newer: npt.NDArray[np.bool_] | None
    extra: int

    def unstored(self) -> int:
        return len(self.blocks) - int(self.held.sum()) if self.held is not None else 0


@dataclass
class Plan:
    """A replay's steps (`running` first, then the waiting ones, in order), of the queue's
    `version`, with the `newer` blocks and `outputs` it ended with (no batch changes them)."""

    version: int
    steps: list[Step]
    running: int
    newer: dict[BlockId, None]
    outputs: int
    noted: list[BlockId] = field(default_factory=list)  # blocks named by batches since

    def note(self, blocks: Iterable[BlockId]) -> bool:
        """A batch stored or removed `blocks`; False when the plan is no longer worth keeping."""
        self.noted.extend(blocks)
        return len(self.noted) <= MAX_NOTED

    def again(
        self, order: Order, total: int, held: Mapping[BlockId, object], room: int
    ) -> Replayed | None:
        """The replay on the worker's order, held blocks and room now (None: it evicts blocks
        the requests ahead stored, which the plan does not follow: replay afresh)."""
        replay = _Replay(order, total, held, room)
        self._renamed(order, replay)
        running = self.steps[: self.running]
        for step in running:
            assert step.keys is not None and step.newer is not None
            replay.take(order.ranks_of(step.keys), step.newer)
        for step in running:
            if replay.advance(step.unstored() + step.extra) > 0:
                return None
        for step in self.steps[self.running :]:
            missing = len(step.blocks)
            if step.keys is not None and step.held is not None and step.newer is not None:
                ranks = order.ranks_of(step.keys)
                missing -= int(replay.kept(step.held, ranks, step.newer).sum())
                replay.take(ranks, step.newer)
            else:
                missing = 0
            if replay.advance(missing + step.extra) > 0:
                return None
        replay.newer, replay.outputs = self.newer, self.outputs
        return Replayed(replay)

    def _renamed(self, order: Order, replay: _Replay) -> None:
        """The requests naming a block the batches named: their keys and held blocks anew."""
        if not self.noted:
            return
        noted = set(self.noted)
        self.noted = []
        for step in self.steps:
            if step.keys is not None and not noted.isdisjoint(step.blocks):
                step.keys, step.held = order.keys(step.blocks), replay.held_of(step.blocks)

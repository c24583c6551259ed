"""The queue replay's shortcuts (`_Replay.past`: the old order all evicted; `_Replay._gaps`:
where eviction ends found in one search; the requests ahead's blocks evicted in C; h190:
`_Replay.renew`, which of a request's blocks are newer found by the pops that move them;
`replan.Ran`, the running requests' renewals reused while they are the same) give the
answers of the replay as it was before them (main 4f4ce95's `_Replay`, kept below as the
oracle): random events, queue changes and Picks on small caches that thrash, every Pick's
surviving match compared, and the shortcuts shown taken."""

from __future__ import annotations

import collections
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from unittest.mock import patch

import numpy as np
import numpy.typing as npt

from kinference.kvcache import replan, replayed
from kinference.kvcache.ageing import WorkerAges
from kinference.kvcache.blocks import BlockId
from kinference.kvcache.order import UNKNOWN, Order
from kinference.kvcache.queue import Queued
from tests.kvcache import test_queue_replays as replays


@dataclass
class _Oracle:
    """main 4f4ce95's `kvcache.replayed._Replay`, unchanged but for its name and comments."""

    order: Order
    total: int
    held: Mapping[BlockId, object]
    room: int
    evicted: int = 0
    taken: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    newer: dict[BlockId, None] = field(default_factory=dict)
    outputs: int = 0
    exhausted: bool = False

    def present(
        self, blocks: Sequence[BlockId], ranks: npt.NDArray[np.int64], newer: npt.NDArray[np.bool_]
    ) -> npt.NDArray[np.bool_]:
        held = np.fromiter(map(self.held.__contains__, blocks), bool, len(blocks))
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
        ranks = ranks[~newer & (ranks != UNKNOWN) & (ranks >= self.evicted)]
        if len(ranks):
            self.taken = np.sort(np.concatenate((self.taken, ranks)))
        collections.deque(map(self.newer.pop, reversed(blocks), itertools.repeat(None)), maxlen=0)
        self.outputs += output
        self.newer.update(dict.fromkeys(range(-self.outputs, -self.outputs + output)))
        self.newer.update(dict.fromkeys(reversed(blocks)))

    def compute(self, count: int, own: Sequence[BlockId]) -> None:
        fits = min(self.room, count)
        self.room -= fits
        need = count - fits
        total, taken = self.total, self.taken
        if need > 0 and self.evicted < total:
            below = int(taken.searchsorted(self.evicted)) if len(taken) else 0
            while need > 0 and self.evicted < total:
                end = min(self.evicted + need, total)
                at = int(taken.searchsorted(end)) if len(taken) else 0
                need -= (end - self.evicted) - (at - below)
                self.evicted, below = end, at
        if need > 0:
            self.exhausted = True
            keep = set(own)
            gone = list(itertools.islice((b for b in self.newer if b not in keep), need))
            collections.deque(map(self.newer.pop, gone), maxlen=0)


def _counted(name: str, counts: collections.Counter[str]):  # type: ignore[no-untyped-def]
    """`_Replay.<name>`, counting the calls that take its shortcut (a true or non-None answer)."""
    of = getattr(replayed._Replay, name)

    def counting(self: replayed._Replay) -> object:
        found = of(self)
        counts[name] += found is True or (name == "_gaps" and len(self.taken) > 0)
        return found

    return counting


def _reused(counts: collections.Counter[str]):  # type: ignore[no-untyped-def]
    """`Ran.same`, counting the replays that reuse the running requests' renewals."""
    same = replan.Ran.same

    def counting(self: replan.Ran, running: list[tuple[int, Queued]]) -> bool:
        found = same(self, running)
        counts["ran"] += found
        return found

    return counting


def test_the_shortcuts_answer_as_the_replay_before_them() -> None:
    counts: collections.Counter[str] = collections.Counter()
    checked = cut = 0
    with (
        patch.object(replays, "_Replay", _Oracle),  # `reference` replays on the oracle
        patch.object(replayed._Replay, "past", _counted("past", counts)),
        patch.object(replayed._Replay, "_gaps", _counted("_gaps", counts)),
        patch.object(replan.Ran, "same", _reused(counts)),
    ):
        for seed in range(30):
            driver = replays._Driver(seed, document_blocks=12)
            driver.weights = (6, 1, 8, 3, 2, 1, 0, 1, 8, 2, 3, 1)  # many requests ahead
            for _ in range(400):
                driver.step()
            checked, cut = checked + driver.checked, cut + driver.cut
    assert checked > 5000 and cut > 2000  # ~7,000 Picks, ~3,000 of them cut by the replay
    assert counts["past"] > 10_000 and counts["_gaps"] > 10_000  # the shortcuts were taken
    assert counts["ran"] > 1000  # running requests' renewals reused


def _stepped(taken: npt.NDArray[np.int64], evicted: int, need: int, total: int) -> tuple[int, int]:
    """main 4f4ce95's `_Replay.advance` past its room: where eviction ends, what is left."""
    below = int(taken.searchsorted(evicted)) if len(taken) else 0
    while need > 0 and evicted < total:
        end = min(evicted + need, total)
        at = int(taken.searchsorted(end)) if len(taken) else 0
        need -= (end - evicted) - (at - below)
        evicted, below = end, at
    return evicted, need


def test_eviction_ends_where_the_stepping_ended() -> None:
    """`advance` against the loop it replaces: taken places dense or sparse, some taken
    twice (ranks clipped alike), eviction from anywhere, past the order's end or not."""
    rng = np.random.default_rng(7)
    for _ in range(20_000):
        total = int(rng.integers(1, 80))
        taken = np.sort(rng.integers(0, total + 3, int(rng.integers(0, 2 * total))))
        evicted, need = int(rng.integers(0, total + 1)), int(rng.integers(1, 2 * total))
        replay = replayed._Replay(Order(WorkerAges()), total, {}, 0, evicted, taken)
        left = replay.advance(need)
        assert (replay.evicted, left) == _stepped(taken, evicted, need, total)


def test_renew_is_newer_of_then_add() -> None:
    """`renew` against the two passes it replaces (main's `newer_of`, then `add`): the same
    mask, the same `newer` in the same order, blocks named twice and output keys included."""
    rng = np.random.default_rng(11)
    twice = 0
    for _ in range(5_000):
        pool = rng.integers(-6, 40, int(rng.integers(1, 60))).tolist()  # negatives: outputs' keys
        start = dict.fromkeys(rng.permutation(pool).tolist()[: int(rng.integers(0, 40))], True)
        blocks = tuple(rng.choice(pool, int(rng.integers(0, 30))).tolist())
        outputs, output = int(rng.integers(0, 5)), int(rng.integers(0, 4))
        oracle = _Oracle(Order(WorkerAges()), 0, {}, 0, newer=dict(start), outputs=outputs)
        expected = oracle.newer_of(blocks)
        oracle.use(blocks, np.full(len(blocks), UNKNOWN), expected, output)
        replay = replayed._Replay(Order(WorkerAges()), 0, {}, 0, newer=dict(start), outputs=outputs)
        assert replay.renew(blocks, output).tolist() == expected.tolist()
        assert list(replay.newer) == list(oracle.newer) and replay.outputs == oracle.outputs
        assert all(replay.newer.values())  # what the next `renew`'s pops find
        twice += len(set(blocks)) < len(blocks)
    assert twice > 1000


def test_running_renewals_are_reused_only_for_the_same_requests() -> None:
    """`Ran.same`: the same keys, the same blocks (the very tuples) and outputs, in order."""
    blocks = (1, 2, 3)
    ran = replan.Ran([(7, blocks, 2)], [np.zeros(3, bool)], {}, 2)
    assert ran.same([(7, Queued(blocks, 0, 2, 0.0, True))])
    assert not ran.same([(7, Queued(blocks, 0, 3, 0.0, True))])  # another output
    assert not ran.same([(7, Queued(tuple(list(blocks)), 0, 2, 0.0, True))])  # named anew
    assert not ran.same([(8, Queued(blocks, 0, 2, 0.0, True))])  # another request
    assert not ran.same([(7, Queued(blocks, 0, 2, 0.0, True))] * 2)  # one more

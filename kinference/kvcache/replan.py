"""A worker's queue replayed (`kvcache.queue`), reusing what its last replays saw.

An event batch, a request sent, started or ended changes a worker's held blocks, its
eviction order, its room or its queue, so a replay of before it is not the answer after it.
But most of a replay's work is naming: each request ahead's blocks looked up in the worker's
ages (their keys), in its held blocks, and among the blocks the requests before it use
(`newer`). A block's key changes only when a touch names it or it is removed, or when a
touch splits an earlier one (`WorkerAges.splits`); whether it is held, only when a batch
stores or removes it. So a `Plan` keeps each queued request's keys and held blocks, the
blocks batches and touches name since mark the requests to look up again (a touch that
splits an earlier one re-keys its tail: all of them). And the steps' `newer` masks (which
blocks the requests before each use) do not depend on the cache while the replay evicts none of
theirs (`_Replay.exhausted`): a queue unchanged since the last replay keeps them, one
changed since (a request sent, started, ended) gets them in one pass over sets
(`_restep`), and the replay then runs on the new order and room in numpy alone. A replay
that must start afresh still reuses the running requests' renewals (`Ran`: which of their
blocks the ones before used, and `newer` after them) while those requests are the same. Same
steps, same answers (`tests/kvcache/test_queue_replays.py` compares them with a fresh
replay after random batches and queue changes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from kinference.kvcache.ageing import WorkerAges
from kinference.kvcache.blocks import BlockId
from kinference.kvcache.order import Order
from kinference.kvcache.replayed import Replayed, _Replay

if TYPE_CHECKING:
    from kinference.kvcache.queue import EngineQueue, Queued

# Blocks of waiting requests replayed by name per replay of a worker (~0.27 µs each); the ones
# past it count as computed whole (they evict, and keep nothing of this prompt).
MAX_REPLAYED_BLOCKS = 8192
# Blocks batches and touches may name between two replays before the plan is dropped
# (marking the requests that name them costs a pass over their blocks, as a replay would).
MAX_NOTED = 4096


@dataclass(slots=True)
class Named:
    """A queued request's blocks, their keys in the worker's ages, which are held."""

    blocks: tuple[BlockId, ...]
    keys: npt.NDArray[np.int64]
    held: npt.NDArray[np.bool_]


@dataclass(slots=True)
class Step:
    """A request ahead in a replay: its key in the queue, which of its blocks the requests
    before it used (None: past the replay's bound, counted as computed whole), the blocks it
    adds past its named prompt (rest and output; all of them when past the bound)."""

    key: int
    newer: npt.NDArray[np.bool_] | None
    extra: int


@dataclass(slots=True)
class Ran:
    """The running requests' `_Replay.renew`s in `_afresh`: they depend on those requests'
    blocks and outputs alone (`newer` starts empty, no block of it is evicted before they
    are all renewed), so they hold while the running requests are the same, in order."""

    requests: list[tuple[int, tuple[BlockId, ...], int]]  # key, blocks (the same), decode
    masks: list[npt.NDArray[np.bool_]]  # each one's `renew`: which blocks were newer
    newer: dict[BlockId, bool]  # `newer` once all are renewed (copied before each use)
    outputs: int

    def same(self, running: list[tuple[int, Queued]]) -> bool:
        return len(running) == len(self.requests) and all(
            key == was and request.blocks is blocks and request.decode == decode
            for (key, request), (was, blocks, decode) in zip(running, self.requests, strict=True)
        )


@dataclass
class Plan:
    """What a worker's replays saw: each queued request's `Named` (all named again once
    `splits` is not the worker's); the steps of the last replay of the queue's `version`,
    `running` of them first, with the `newer` blocks and `outputs` it ended with (None: it
    evicted some)."""

    splits: int
    named: dict[int, Named] = field(default_factory=dict)
    noted: list[BlockId] = field(default_factory=list)  # named by batches, touches since
    version: int = -1
    steps: list[Step] = field(default_factory=list)
    running: int = 0
    newer: dict[BlockId, bool] | None = None
    outputs: int = 0
    ran: Ran | None = None  # the last `_afresh`'s running requests, renewed

    def note(self, blocks: Iterable[BlockId]) -> bool:
        """A batch or a touch named `blocks`; False when the plan is no longer worth keeping."""
        self.noted.extend(blocks)
        return len(self.noted) <= MAX_NOTED

    def _renamed(self) -> None:
        """The requests naming a block named since: to look up again."""
        if self.noted:
            noted = set(self.noted)
            self.noted = []
            stale = [k for k, n in self.named.items() if not noted.isdisjoint(n.blocks)]
            for key in stale:
                del self.named[key]

    def _of(self, key: int, request: Queued, order: Order, replay: _Replay) -> Named:
        found = self.named.get(key)
        if found is None or found.blocks is not request.blocks:
            blocks = request.blocks
            found = self.named[key] = Named(blocks, order.keys(blocks), replay.held_of(blocks))
        return found


def planned(
    queue: EngineQueue,
    ages: WorkerAges,
    *,
    held: Mapping[BlockId, object],
    room: int,
    plan: Plan | None = None,
) -> tuple[Replayed, Plan]:
    """The requests ahead in `queue` scheduled on the worker's eviction order (`ages`), its
    cache holding `held` with `room` blocks left (`kvcache.queue.replay`), from `plan` where
    it still holds; and the plan for the next."""
    if plan is None:
        plan = Plan(ages.splits)
    elif plan.splits != ages.splits:  # blocks re-keyed: every request's keys named again
        plan.splits, plan.named, plan.noted = ages.splits, {}, []
    if queue.work() <= room:
        return Replayed(None), plan
    order = ages.order()
    plan._renamed()
    if plan.newer is not None:  # the last replay evicted none of the requests ahead's blocks
        if plan.version != queue.version:
            _restep(queue, plan)
        found = _again(queue, plan, _Replay(order, len(ages.touched), held, room))
        if found is not None:
            return found, plan
    return _afresh(queue, plan, _Replay(order, len(ages.touched), held, room)), plan


def _restep(queue: EngineQueue, plan: Plan) -> None:
    """`plan`'s steps for the queue as it is now (a request sent, started, ended): each
    step's `newer` mask from the blocks the steps before it use, in one pass over sets,
    as `_afresh` would name them while it evicts none of them (`_again` checks that)."""
    requests = queue.requests
    keys = [k for k, q in requests.items() if q.running]
    running = len(keys)
    keys += [k for k, q in requests.items() if not q.running]
    seen: set[BlockId] = set()  # the blocks of the steps so far, and their outputs' keys
    steps: list[Step] = []
    outputs, budget = 0, MAX_REPLAYED_BLOCKS
    for at, key in enumerate(keys):
        request = requests[key]
        blocks = request.blocks
        if at >= running:
            budget -= len(blocks)
            if budget < 0:  # past the bound: counted as computed whole, without names
                steps.append(Step(key, None, len(blocks) + _extra(request)))
                continue
        newer = np.fromiter(map(seen.__contains__, blocks), bool, len(blocks))
        seen.update(blocks)
        seen.update(range(-outputs - request.decode, -outputs))  # `_Replay.use`'s keys
        outputs += request.decode
        steps.append(Step(key, newer, _extra(request)))
    plan.named = {key: plan.named[key] for key in requests if key in plan.named}
    plan.version, plan.steps, plan.running = queue.version, steps, running
    plan.newer, plan.outputs = dict.fromkeys(seen, True), outputs


def _afresh(queue: EngineQueue, plan: Plan, replay: _Replay) -> Replayed:
    """The replay step by step, its steps kept in `plan`."""
    order, requests = replay.order, queue.requests
    running: list[Step] = []
    waiting = [key for key, request in requests.items() if not request.running]
    using = [(key, request) for key, request in requests.items() if request.running]
    ran = plan.ran if plan.ran is not None and plan.ran.same(using) else None
    for at, (key, request) in enumerate(using):  # in use until it ends; its output to come
        named = plan._of(key, request, order, replay)
        # `newer_of`, then `add`; or as the last replay renewed it
        newer = replay.renew(request.blocks, request.decode) if ran is None else ran.masks[at]
        replay.take(order.ranks_of(named.keys), newer)  # `use`'s other half
        running.append(Step(key, newer, _extra(request)))
    if ran is not None:
        replay.newer, replay.outputs = dict(ran.newer), ran.outputs
    else:
        done = [(key, request.blocks, request.decode) for key, request in using]
        masks = [step.newer for step in running if step.newer is not None]
        plan.ran = Ran(done, masks, dict(replay.newer), replay.outputs)
    for step in running:  # what it has not stored yet, and its output
        blocks = requests[step.key].blocks
        replay.compute(_unstored(plan.named[step.key]) + step.extra, blocks)
    steps = list(running)
    budget = MAX_REPLAYED_BLOCKS
    for key in waiting:  # computes the blocks it does not find
        request = requests[key]
        budget -= len(request.blocks)
        if budget < 0:  # past the bound: counted as computed whole, without names
            steps.append(Step(key, None, len(request.blocks) + _extra(request)))
            replay.compute(steps[-1].extra, ())
            continue
        newer = replay.renew(request.blocks, request.decode)  # `newer_of`, then `add`
        if replay.past():  # the old order all evicted: it finds the requests ahead's alone
            missing = len(request.blocks) - int(newer.sum())
        else:
            named = plan._of(key, request, order, replay)
            ranks = order.ranks_of(named.keys)
            missing = len(request.blocks) - int(replay.kept(named.held, ranks, newer).sum())
            replay.take(ranks, newer)  # `use`'s other half (`renew` did `add`)
        replay.compute(missing + _extra(request), request.blocks)
        steps.append(Step(key, newer, _extra(request)))
    plan.named = {key: plan.named[key] for key in requests if key in plan.named}
    plan.version, plan.steps, plan.running = queue.version, steps, len(running)
    plan.newer = None if replay.exhausted else replay.newer
    plan.outputs = replay.outputs
    return Replayed(replay)


def _again(queue: EngineQueue, plan: Plan, replay: _Replay) -> Replayed | None:
    """`_afresh` for the queue of `plan`'s steps, on the order, held blocks and room now
    (None: it evicts blocks the requests ahead stored, which the plan does not follow)."""
    order, requests = replay.order, queue.requests
    running = plan.steps[: plan.running]
    for step in running:
        named = plan._of(step.key, requests[step.key], order, replay)
        assert step.newer is not None
        replay.take(order.ranks_of(named.keys), step.newer)
    for step in running:
        if replay.advance(_unstored(plan.named[step.key]) + step.extra) > 0:
            return None
    for step in plan.steps[plan.running :]:
        missing = 0
        if step.newer is not None:
            named = plan._of(step.key, requests[step.key], order, replay)
            ranks = order.ranks_of(named.keys)
            missing = len(named.blocks) - int(replay.kept(named.held, ranks, step.newer).sum())
            replay.take(ranks, step.newer)
        if replay.advance(missing + step.extra) > 0:
            return None
    assert plan.newer is not None
    replay.newer, replay.outputs = plan.newer, plan.outputs
    return Replayed(replay)


def _unstored(named: Named) -> int:
    return len(named.blocks) - int(named.held.sum())


def _extra(request: Queued) -> int:
    return request.unnamed + request.decode

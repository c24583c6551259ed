"""A batch whose two passes (the block-size check, then the events applied) would take no
turn of the loop is applied in one (`subscriber._at_once`): the same turns taken, the same
work left in the step's budget, the same answer and the same index as the two passes give,
whatever the budget already spent (random batches against the passes alone)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.kvcache.pool import PoolCaches
from kinference.kvevents import subscriber as subscriber_module
from kinference.kvevents.events import AllBlocksCleared, BlockRemoved, BlockStored, Event
from kinference.kvevents.steps import Budget
from kinference.kvevents.subscriber import EventSubscriber, Feed
from kinference.kvevents.trust import WorkerTrust

SIZE = 2  # the pool's block size


@st.composite
def _events(draw: Any) -> tuple[Event, ...]:
    events: list[Event] = []
    for n in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["stored", "stored", "removed", "cleared"]))
        blocks = draw(st.integers(0, 40))
        hashes = tuple(range(100 * n + 1, 100 * n + 1 + blocks))
        if kind == "stored":
            size = draw(st.sampled_from([SIZE, SIZE, SIZE, 3]))
            tokens = np.arange(blocks * size, dtype=np.uint32) + n
            events.append(BlockStored(hashes, None, tokens, size))
        elif kind == "removed":
            events.append(BlockRemoved(hashes[: blocks // 2]))
        else:
            events.append(AllBlocksCleared())
    return tuple(events)


def _applied(
    events: tuple[Event, ...], per_step: int, spent: int, at_once: bool
) -> tuple[object, ...]:
    pool = PoolCaches("p", SIZE, clock=lambda: 0.0)
    trust = pool.trust[0] = WorkerTrust(5.0, 10.0)
    feed = Feed(pool, 0, "e0", "tcp://unused:1", None, b"", trust)
    subscriber = EventSubscriber(lambda: 0.0)
    budget = Budget(per_step)
    budget.spent = spent
    with pytest.MonkeyPatch.context() as patch:
        if not at_once:
            patch.setattr(subscriber_module, "_at_once", lambda *_: False)
        steps = subscriber._apply(feed, events, 0.0, budget)
        turns = 0
        while True:
            try:
                next(steps)
            except StopIteration as stop:
                answer = stop.value
                break
            turns += 1
    subscriber._context.destroy(linger=0)
    held = dict(pool.index.held(0))
    ages = pool.ages.get(0)
    return (
        answer, turns, budget.spent, budget.turns, held, trust.distrust,
        None if ages is None else (ages.touched, ages.live), pool.peaks, pool.capacity,
    )  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(_events(), st.integers(8, 400), st.data())
def test_one_pass_is_the_two_passes(events: tuple[Event, ...], per_step: int, data: Any) -> None:
    spent = data.draw(st.integers(0, per_step - 1))
    assert _applied(events, per_step, spent, True) == _applied(events, per_step, spent, False)

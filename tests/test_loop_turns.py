"""One heavy step per loop iteration (`kinference.loop_turns`): steps that arrive together
run in order, one per iteration, with the loop's other callbacks between them."""

from __future__ import annotations

import asyncio
import itertools

from kinference.loop_turns import LoopTurns


async def test_steps_that_arrive_together_take_one_iteration_each() -> None:
    turns, log = LoopTurns(), []

    async def step(name: str) -> None:
        await turns.turn()
        log.append(name)

    async def probe() -> None:  # another callback of the loop: ready every iteration
        for _ in range(8):
            log.append("probe")
            await asyncio.sleep(0)

    await asyncio.gather(step("a"), step("b"), step("c"), probe())
    steps = [i for i, entry in enumerate(log) if entry != "probe"]
    assert [log[i] for i in steps] == ["a", "b", "c"]  # in order
    assert all(b - a > 1 for a, b in itertools.pairwise(steps))  # never adjacent
    assert turns.waiting == 0


async def test_a_cancelled_waiter_does_not_hold_the_turns_up() -> None:
    turns, log = LoopTurns(), []

    async def step(name: str) -> None:
        await turns.turn()
        log.append(name)

    first = asyncio.ensure_future(step("a"))
    second = asyncio.ensure_future(step("b"))
    third = asyncio.ensure_future(step("c"))
    await asyncio.sleep(0)  # a has its turn; b and c wait
    second.cancel()
    await asyncio.gather(first, third, return_exceptions=True)
    assert log == ["a", "c"] and second.cancelled()
    await asyncio.sleep(0)
    await step("d")  # free again: runs at once
    assert log[-1] == "d"


async def test_a_lone_step_runs_at_once() -> None:
    turns = LoopTurns()
    await turns.turn()
    await asyncio.sleep(0)  # the turn passes on (to nobody)
    await turns.turn()
    assert turns.waiting == 0

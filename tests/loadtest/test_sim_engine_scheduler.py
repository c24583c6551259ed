"""The simulated engine's batch slots when a waiting request gives up."""

from __future__ import annotations

import asyncio

from loadtest.engine_model import EngineModel, Timing
from loadtest.sim_engine.prefill import SideBySide
from loadtest.sim_engine.scheduler import Job, Scheduler
from tests.loadtest.test_sim_engine_prefill import Seen
from tests.virtual_time import run_virtual


def job(tag: str) -> Job:
    return Job(tag, "p" * 64, "r" * 8, 2, asyncio.get_running_loop().time())


def test_a_waiting_request_cancelled_as_a_slot_frees_leaves_no_slot_taken() -> None:
    """The waiting request's task is cancelled (its client hung up), and in the same turn
    of the loop the running one ends and hands its slot on: the cancelled one must not get
    it. Before: `_release` granted the slot to the cancelled future (InvalidStateError out
    of the running job's end, the slot counted running for ever): after 300 clients hung up
    at once, an engine showed 64 running and 73 waiting and answered nothing."""

    async def scenario() -> None:
        model = EngineModel(4096, 64, 0, chars_per_token=4, timing=Timing(jitter=0.0))
        scheduler = Scheduler(
            model,
            Seen(),
            SideBySide(model, time_scale=1.0),
            max_num_seqs=1,
            time_scale=1.0,
            stream_step_s=0.0,
            clock=asyncio.get_running_loop().time,
        )
        running = scheduler.generate(job("a"))
        assert await anext(running) == 1  # holds the one slot
        waiting = asyncio.create_task(anext(scheduler.generate(job("b"))))
        await asyncio.sleep(0)
        assert scheduler.waiting == 1
        waiting.cancel()  # its future is cancelled now, its task runs later
        await running.aclose()  # the slot frees in the same turn
        await asyncio.gather(waiting, return_exceptions=True)
        assert (scheduler.running, scheduler.waiting) == (0, 0)
        steps = [step async for step in scheduler.generate(job("c"))]
        assert sum(steps) == 2

    run_virtual(scenario())

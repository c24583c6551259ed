"""The parse worker under a crowd: parses, pings and recycles cancelled at random loop
steps, workers killed by short deadlines, and `aclose` (itself cancelled, or not) in the
middle, on asyncio and on uvloop.

    python -m docs.h182.offload_crowd SECONDS SEED [--uvloop]

Each round: one `Offload` (recycle bound 1 byte or the default; job deadline 0.05 s or 30 s),
4-24 concurrent parses of 20-300 KB bodies and 0-3 `start`s, each caller cancelled after
0-40 loop steps with probability 0.3; (p 0.3) after 0-60 steps an `aclose`, cancelled
after 0-3 steps with probability 0.3, or once 0-all of the callers ended, then parses begun
after it; then a final `aclose`. After
it, checked: every child process reaped within 10 s, the process's open descriptors back
to the round's start (after a collection), the body budget back to 0, `abandoned` run once
for each parse that did not return normally and never for one that did, and no job begun
after the first `aclose` made a process (h182).
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from docs.h182.common import children, descriptors, runner
from kinference.bodies import ByteBudget
from kinference.errors import PickerError
from kinference.requests.offload import RECYCLE_RSS_BYTES, Offload
from kinference.requests.process import WorkerProcess
from tests.requests import uploaded_body

MiB = 1 << 20


def body_of(rng: random.Random) -> bytes:
    n = rng.randrange(20, 300) * 1000 // 40
    return json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "w" * 30}] * n}
    ).encode()


class Counting:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


class Crowd:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.worker = WorkerProcess()
        self.offload = Offload(
            self.worker,
            deadline_s=rng.choice([0.05, 30.0]),
            recycle_rss_bytes=rng.choice([1, RECYCLE_RSS_BYTES]),
        )
        self.budget = ByteBudget(512 * MiB)
        self.outcomes: dict[str, int] = {}
        self.bad_abandons = 0
        self.closed = False
        self.after_close_pids: set[int] = set()
        self.ended, self.close_after = 0, 0
        self.time_to_close = asyncio.Event()

    def note(self, what: str) -> None:
        self.outcomes[what] = self.outcomes.get(what, 0) + 1
        self.ended += 1
        if self.ended >= self.close_after:
            self.time_to_close.set()

    async def cancelled_maybe(self, make: Callable[[], Any], p: float, steps: int) -> Any:
        task = asyncio.ensure_future(make())
        await asyncio.sleep(0)  # begun (a coroutine cancelled before its start never ran)
        if self.rng.random() < p:
            for _ in range(self.rng.randrange(0, steps)):
                if task.done():
                    break
                await asyncio.sleep(0)
            task.cancel()
        return await task

    async def parse(self) -> None:
        abandoned, data = Counting(), body_of(self.rng)
        after_close = self.closed
        before = children()
        outcome = "error"
        try:
            await self.cancelled_maybe(
                lambda: self.offload.parse(self.budget, uploaded_body(data), abandoned=abandoned),
                0.3, 40,
            )  # fmt: skip
            outcome = "parsed"
        except asyncio.CancelledError:
            outcome = "cancelled"
        except PickerError as exc:
            outcome = type(exc).__name__
        self.note(outcome + (" after close" if after_close else ""))
        if after_close:
            self.after_close_pids |= children() - before
        if outcome == "parsed":
            bad = abandoned.count != 0
        else:  # once the job ended: it may still be running (shielded)
            end = time.monotonic() + 60
            while abandoned.count == 0 and time.monotonic() < end:
                await asyncio.sleep(0.01)
            bad = abandoned.count != 1
        if bad:
            self.bad_abandons += 1
            print(f"abandoned {abandoned.count} times after {outcome}", file=sys.stderr)

    async def start(self) -> None:
        try:
            await self.cancelled_maybe(self.offload.start, 0.3, 40)
            self.note("started")
        except asyncio.CancelledError:
            self.note("start cancelled")

    async def close(self, callers: int) -> None:
        if self.rng.random() < 0.3:  # early, as the first workers start
            for _ in range(self.rng.randrange(0, 60)):
                await asyncio.sleep(0)
        else:  # once some callers (all, at most) are done
            self.close_after = self.rng.randrange(0, callers + 1)
            if self.ended < self.close_after:
                await self.time_to_close.wait()
        try:
            await self.cancelled_maybe(self.offload.aclose, 0.3, 3)
            self.note("closed")
        except asyncio.CancelledError:
            self.note("close cancelled")
        self.closed = True
        await asyncio.gather(*(self.parse() for _ in range(self.rng.randrange(0, 3))))


async def one_round(rng: random.Random) -> dict[str, int]:
    warm = WorkerProcess()  # uvloop opens /dev/null once per loop at a first pipe
    await warm.start()
    await warm.aclose()
    gc.collect()
    fds, kids = descriptors(), children()
    crowd = Crowd(rng)
    work = [crowd.parse() for _ in range(rng.randrange(4, 24))]
    work += [crowd.start() for _ in range(rng.randrange(0, 4))]
    await asyncio.gather(*work, crowd.close(len(work)))
    await crowd.offload.aclose()
    end = time.monotonic() + 10
    while children() - kids and time.monotonic() < end:
        await asyncio.sleep(0.01)
    left = children() - kids
    assert not left, f"children left running or unreaped: {left}"
    assert not crowd.after_close_pids, "a job after aclose started a worker"
    assert crowd.budget.used == 0, f"{crowd.budget.used} bytes still charged"
    assert crowd.bad_abandons == 0, f"{crowd.bad_abandons} parses with abandoned != expected"
    await asyncio.sleep(0)
    gc.collect()
    now = descriptors()
    new = {fd: what for fd, what in now.items() if fds.get(fd) != what}
    assert not new, f"descriptors opened and left: {new} (outcomes {crowd.outcomes})"
    return crowd.outcomes


def main() -> None:
    seconds, seed = float(sys.argv[1]), int(sys.argv[2])
    run = runner()
    rng = random.Random(seed)
    totals: dict[str, int] = {}
    end, rounds = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        for key, value in run(one_round(rng)).items():
            totals[key] = totals.get(key, 0) + value
        rounds += 1
    print(f"seed {seed}: {rounds} rounds, {dict(sorted(totals.items()))}: ok")


if __name__ == "__main__":
    main()

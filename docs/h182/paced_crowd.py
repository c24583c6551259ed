"""Paced rests (`kvcache.paced`, h181) against oracles, under random interleavings.

    python -m docs.h182.paced_crowd SECONDS SEED [--uvloop]

Each round: a crowd of tasks on one loop routes lazily tokenized prompts (sharing
prefixes) to two workers of a precise pool, Picks (`match`) meanwhile, starts and ends
them, and applies the engines' store/remove events; a real thread hands each prompt's rest
back with `call_soon_threadsafe(caches.completed, ...)` after a random delay, as the
tokenizer thread does; the rest budget is 0, 0.1 ms, 2 ms or 1 s. Every call that reached
the pool state is logged in the order it ran (with the clock it read). Checks:

1. Replay: the log replayed synchronously on a fresh `PreciseCaches` (rests applied at
   once: no loop) gives every Pick the same answer and the same final state. So pacing
   only delays a rest: never applies one twice, drops one (under the bound), changes its
   arguments or touches anything else.
2. Order and progress: rests are applied in the order they arrived, each once, and a rest
   is applied within (rests queued before it + 1) loop iterations of its arrival.
3. Unpaced oracle: the same log with each rest applied where it *arrived* (as before h181)
   answers the same to every Pick made while no rest was queued; counted, not asserted,
   where one was (a paced rest's effect is deferred, like a slower thread's).
4. Shutdown: rests arriving after the loop stopped are never applied, raise nothing.
"""

from __future__ import annotations

import asyncio
import random
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from docs.h182.common import runner
from kinference.kvcache.blocks import BlockId, PromptBlocks, identities
from kinference.kvcache.pool import PoolCaches
from kinference.kvcache.precise import PreciseCaches
from kinference.kvevents.events import BlockRemoved, BlockStored
from kinference.kvevents.trust import WorkerTrust

SIZE = 4  # tokens per block
DOCS = 6  # prompts share prefixes of these documents
DOC_BLOCKS = 40


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pool_of(caches: PreciseCaches) -> PoolCaches:
    pool = caches.pools["p"] = PoolCaches("p", SIZE, clock=caches.clock)
    for slot in (0, 1):
        pool.trust[slot] = WorkerTrust(1e9, 1e9)
        pool.trust[slot].on_batch(0, 0.0)
    return pool


def doc_tokens(doc: int) -> list[int]:
    return [doc * 100_000 + i for i in range(DOC_BLOCKS * SIZE)]


def state(caches: PreciseCaches) -> Any:
    pool = caches.pools["p"]
    queues = {
        s: {k: (q.blocks, q.unnamed, q.running) for k, q in queue.requests.items()}
        for s, queue in pool.queues.items()
    }
    pending = {s: sorted(w) for s, w in pool.pending.items()}
    return (
        pending, dict(pool.claims), dict(pool.rests), dict(pool.tickets), queues,
        {s: dict(r) for s, r in pool.reused.items()},
        {s: sorted(pool.index.held(s)) for s in (0, 1)},
    )  # fmt: skip


def answer(caches: PreciseCaches, prompt: PromptBlocks) -> tuple[float, ...]:
    found = caches.match("p", prompt, [0, 1])
    assert found is not None
    return tuple(found.blocks.tolist())


class Run:
    """One round on the running loop; `log` is every state change and Pick in order."""

    def __init__(self, rng: random.Random, budget: float) -> None:
        self.rng = rng
        self.clock = Clock()
        self.caches = PreciseCaches(clock=self.clock, rest_budget=budget)
        pool_of(self.caches)
        self.log: list[tuple[Any, ...]] = []
        self.iteration = 0
        self.arrived: list[tuple[int, int]] = []  # (ticket, iteration)
        self.applied: list[tuple[int, int]] = []
        self.queued_at_pick: list[bool] = []
        self.answers: list[tuple[float, ...]] = []  # each Pick's, as given
        apply = self.caches.arriving._apply

        def logged(rest: tuple[str, int, tuple[BlockId, ...]]) -> None:
            self.log.append(("complete", self.clock.now, rest))
            self.applied.append((rest[1], self.iteration))
            apply(rest)

        self.caches.arriving._apply = logged
        arrive = self.caches.completed

        def completed(ref: str, ticket: int, blocks: tuple[BlockId, ...]) -> None:
            self.log.append(("arrive", self.clock.now, (ref, ticket, blocks)))
            self.arrived.append((ticket, self.iteration))
            arrive(ref, ticket, blocks)

        self.completed = completed

    def do(self, what: str, *args: Any) -> Any:
        self.clock.now += self.rng.random() * 0.01
        self.log.append((what, self.clock.now, args))
        pool = self.caches.pools["p"]
        if what == "pick":
            self.queued_at_pick.append(len(self.caches.arriving) > 0)
            self.answers.append(answer(self.caches, args[0]))
            return self.answers[-1]
        if what == "routed":
            slot, cached, prompt, key = args
            return self.caches.routed("p", slot, cached, prompt, key=key)
        if what == "started":
            return pool.started(*args)
        if what == "finished":
            return pool.finished(*args)
        if what == "events":
            return pool.apply(*args)
        raise AssertionError(what)

    async def ticker(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(0)
            self.iteration += 1

    async def request(self, key: int, thread: Rests) -> None:
        rng = self.rng
        doc = rng.randrange(DOCS)
        tokens = doc_tokens(doc)[: rng.randrange(2, DOC_BLOCKS) * SIZE + rng.randrange(SIZE)]
        blocks = tuple(identities(tokens, SIZE))
        head = blocks[: rng.randrange(0, len(blocks) + 1)]
        lazy = len(head) < len(blocks) or rng.random() < 0.3
        prompt = PromptBlocks(len(tokens), SIZE, head, exact=not lazy, ticket=key if lazy else 0)
        await self.steps()
        cached = self.do("pick", prompt)
        slot = rng.randrange(2) if cached[0] == cached[1] else int(cached[1] > cached[0])
        usable = blocks[: max(len(tokens) - 1, 0) // SIZE]
        if lazy:  # the rest, tokenized on the thread, before or after it is routed
            thread.put(key, usable, rng.random() * 0.002)
        await self.steps()
        self.do("routed", slot, int(cached[slot]), prompt, key)
        await self.steps()
        self.do("started", slot, key)
        await self.steps()
        if rng.random() < 0.8:  # the engine stores its blocks (some evicted on the other)
            hashes = tuple(doc * 1000 + i for i in range(len(usable)))
            stored = BlockStored(hashes, None, tuple(tokens[: len(usable) * SIZE]), SIZE)
            self.do("events", slot, [stored])
        if rng.random() < 0.2:
            gone = tuple(doc * 1000 + i for i in range(rng.randrange(DOC_BLOCKS), DOC_BLOCKS))
            self.do("events", 1 - slot, [BlockRemoved(gone)])
        await self.steps()
        self.do("finished", slot, key)

    async def steps(self) -> None:
        for _ in range(self.rng.randrange(0, 4)):
            await asyncio.sleep(0)


class Rests(threading.Thread):
    """The tokenizer thread's stand-in: hands rests back after their delay, in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, completed: Callable[..., None]) -> None:
        super().__init__(daemon=True)
        self.loop, self.completed = loop, completed
        self.queue: list[tuple[int, tuple[BlockId, ...], float]] = []
        self.ready = threading.Condition()
        self.closed = False

    def put(self, ticket: int, blocks: tuple[BlockId, ...], delay: float) -> None:
        with self.ready:
            self.queue.append((ticket, blocks, delay))
            self.ready.notify()

    def run(self) -> None:
        while True:
            with self.ready:
                while not self.queue and not self.closed:
                    self.ready.wait()
                if not self.queue:
                    return
                ticket, blocks, delay = self.queue.pop(0)
            time.sleep(delay)
            try:
                self.loop.call_soon_threadsafe(self.completed, "p", ticket, blocks)
            except RuntimeError:  # the loop closed
                return

    def close(self) -> None:
        with self.ready:
            self.closed = True
            self.ready.notify()


async def crowd(rng: random.Random, budget: float, tasks: int) -> Run:
    run = Run(rng, budget)
    loop = asyncio.get_running_loop()
    thread = Rests(loop, run.completed)
    thread.start()
    stop = asyncio.Event()
    ticker = asyncio.create_task(run.ticker(stop))
    await asyncio.gather(*(run.request(key, thread) for key in range(1, tasks + 1)))
    thread.close()
    await asyncio.to_thread(thread.join)
    while len(run.caches.arriving):  # the last rests drain
        await asyncio.sleep(0)
    stop.set()
    await ticker
    return run


def replay(run: Run, paced: bool) -> tuple[list[tuple[float, ...]], Any]:
    """The log on a fresh PreciseCaches outside a loop: rests applied where they were
    applied (`paced`) or where they arrived (the unpaced oracle)."""
    clock = Clock()
    caches = PreciseCaches(clock=clock)
    pool = pool_of(caches)
    answers = []
    for what, now, args in run.log:
        clock.now = now
        if what == ("complete" if paced else "arrive"):
            caches._complete(args)
        elif what == "pick":
            answers.append(answer(caches, args[0]))
        elif what == "routed":
            slot, cached, prompt, key = args
            caches.routed("p", slot, cached, prompt, key=key)
        elif what in ("started", "finished"):
            getattr(pool, what)(*args)
        elif what == "events":
            pool.apply(*args)
    return answers, state(caches)


def check(run: Run) -> dict[str, int]:
    paced_answers, paced_state = replay(run, paced=True)
    assert paced_answers == run.answers, "replay: a Pick answered otherwise"
    assert paced_state == state(run.caches), "replay: the final state differs"
    arrived = [t for t, _ in run.arrived]
    assert [t for t, _ in run.applied] == arrived, "rests not applied once each, in order"
    for n, ((_, came), (_, went)) in enumerate(zip(run.arrived, run.applied, strict=True)):
        ahead = sum(1 for t, i in run.applied[:n] if i >= came)  # queued before it, unapplied
        assert went - came <= ahead + 1, f"rest {n} waited {went - came} iterations"
    unpaced_answers, _ = replay(run, paced=False)
    differ = [
        i for i, (a, b) in enumerate(zip(paced_answers, unpaced_answers, strict=True)) if a != b
    ]
    assert all(run.queued_at_pick[i] for i in differ), "a Pick with no rest queued differs"
    return {"picks": len(run.answers), "rests": len(arrived), "differ_while_queued": len(differ)}


def after_stop() -> int:
    """Rests arriving once the loop stopped: never applied, nothing raised."""
    caches = PreciseCaches(clock=Clock(), rest_budget=0.0)
    pool_of(caches)
    loop = asyncio.new_event_loop()
    applied: list[int] = []
    apply = caches.arriving._apply
    caches.arriving._apply = lambda rest: (applied.append(rest[1]), apply(rest))[1]

    async def burst() -> None:
        for ticket in range(1, 6):
            caches.completed("p", ticket, ())
        await asyncio.sleep(0)  # one applied, then the loop stops

    loop.run_until_complete(burst())
    loop.close()
    with_loop_gone = len(applied)
    caches.completed("p", 99, ())  # outside any loop: applied at once
    assert applied[-1] == 99 and len(applied) == with_loop_gone + 1
    return with_loop_gone


def main() -> None:
    seconds, seed = float(sys.argv[1]), int(sys.argv[2])
    loop_run = runner()
    rng = random.Random(seed)
    end, totals, rounds = time.monotonic() + seconds, {"picks": 0, "rests": 0}, 0
    totals["differ_while_queued"] = 0
    while time.monotonic() < end:
        budget = rng.choice([0.0, 1e-4, 0.002, 1.0])
        tasks = rng.randrange(5, 120)
        run = loop_run(crowd(rng, budget, tasks))
        for key, value in check(run).items():
            totals[key] += value
        rounds += 1
    print(f"seed {seed}: {rounds} rounds, {totals}, applied-before-stop {after_stop()} of 5: ok")


if __name__ == "__main__":
    main()

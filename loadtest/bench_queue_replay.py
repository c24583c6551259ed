"""Micro-benchmark: a precise Pick's queue replays, cached per worker state
(`PoolCaches.surviving`, `kvcache.queue.replay`) against replayed afresh on every Pick
(`kvcache.queue.survivors`, the computation as it was), in the same run on the same state.

A pool of `--workers` full workers (capacity `--capacity` blocks), each with 8-32 requests
of 100-400 blocks in flight (the first few running); each Pick asks every worker for its
surviving match of a prompt on a shared document, then goes to one of them (a `sent`: that
worker's replay is dropped) and a request ends on another. Between Picks `--events`
event batches on average (each: 16 new blocks stored, 16 oldest evicted, on a random worker)
drop their worker's replay (the cached path then replays from its plan, `kvcache.replan`).
Both paths' answers are compared on every call.

    python -m loadtest.bench_queue_replay --events 0 0.5 2 8
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from collections import deque

from kinference.kvcache.blocks import BlockId, PromptBlocks, identities
from kinference.kvcache.pool import PoolCaches, Request
from kinference.kvcache.queue import survivors
from kinference.kvevents.events import BlockRemoved, BlockStored

SIZE = 16  # tokens a block


class _State:
    def __init__(self, seed: int, workers: int, capacity: int) -> None:
        self.rng = random.Random(seed)
        self.pool = PoolCaches("p", SIZE, clock=lambda: 0.0)
        self.workers = workers
        self.hashes = itertools.count(1)
        self.tokens = itertools.count(10_000)
        self.held: list[deque[tuple[int, ...]]] = [deque() for _ in range(workers)]
        self.keys = itertools.count(1)
        self.queued: list[deque[int]] = [deque() for _ in range(workers)]
        self.documents = [self.fresh(self.rng.randint(100, 400)) for _ in range(32)]
        self.capacity = capacity
        for slot in range(workers):
            while sum(map(len, self.held[slot])) < capacity:
                self.store(slot, self.rng.choice(self.documents) + self.fresh(8))
            self.evict(slot)
            for _ in range(self.rng.randint(8, 32)):
                self.send(slot)
            for key in list(self.queued[slot])[: self.rng.randint(1, 4)]:
                self.pool.started(slot, key)

    def fresh(self, blocks: int) -> list[int]:
        return list(itertools.islice(self.tokens, blocks * SIZE))

    def store(self, slot: int, tokens: list[int]) -> None:
        hashes = tuple(itertools.islice(self.hashes, len(tokens) // SIZE))
        self.pool.apply(slot, [BlockStored(hashes, None, tuple(tokens), SIZE)])
        self.held[slot].append(hashes)

    def evict(self, slot: int) -> None:
        """The oldest blocks out, down to the capacity (the pool learns it)."""
        held = self.held[slot]
        while sum(map(len, held)) > self.capacity:
            self.pool.apply(slot, [BlockRemoved(held.popleft())])

    def prompt(self) -> PromptBlocks:
        tokens = self.rng.choice(self.documents) + self.fresh(self.rng.randint(1, 20))
        return PromptBlocks(len(tokens), SIZE, tuple(identities(tokens, SIZE)))

    def send(self, slot: int, prompt: PromptBlocks | None = None) -> None:
        prompt = prompt or self.prompt()
        cached = self.pool.index.longest(prompt.blocks, [slot])[slot]
        key = next(self.keys)
        self.pool.sent(slot, prompt, cached, Request(key, 256, 0.0))
        self.queued[slot].append(key)

    def event(self) -> None:
        slot = self.rng.randrange(self.workers)
        self.store(slot, self.fresh(16))
        self.evict(slot)

    def pick(self, flip: bool) -> tuple[float, float]:
        """Both paths on every worker for one prompt: seconds cached, seconds afresh."""
        pool, prompt = self.pool, self.prompt()
        blocks: tuple[BlockId, ...] = prompt.blocks
        longest = pool.index.longest(blocks, range(self.workers))
        cached = afresh = 0.0
        for slot in range(self.workers):
            depth = pool.extend(slot, blocks, longest[slot], 0.0)
            queue, ages = pool.queues[slot], pool.ages[slot]
            room = (pool.capacity or 0) - pool.index.blocks(slot)
            held = pool.index.held(slot)
            for path in (1, 0) if flip else (0, 1):
                start = time.perf_counter()
                if path:
                    new = pool.surviving(slot, blocks, depth)
                    cached += time.perf_counter() - start
                else:
                    old = survivors(queue, ages, held=held, room=room, blocks=blocks, depth=depth)
                    afresh += time.perf_counter() - start
            assert new == old, (slot, new, old)
        self.send(self.rng.randrange(self.workers), prompt)  # routed
        done = self.rng.randrange(self.workers)
        if len(self.queued[done]) > 8:  # one ends, the next one runs
            self.pool.finished(done, self.queued[done].popleft())
            self.pool.started(done, self.queued[done][min(3, len(self.queued[done]) - 1)])
        return cached, afresh


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=float, nargs="+", default=[0.0, 0.5, 2.0, 8.0])
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--capacity", type=int, default=8192)
    parser.add_argument("--picks", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print("events/pick | picks | cached ms p50 / p90 / total | afresh ms p50 / p90 / total | ratio")
    for rate in args.events:
        state = _State(args.seed, args.workers, args.capacity)
        rng = random.Random(args.seed + 1)
        new, old = [], []
        for i in range(args.picks):
            for _ in range(int(rate) + (rng.random() < rate % 1)):
                state.event()
            cached, afresh = state.pick(bool(i % 2))
            new.append(cached * 1e3)
            old.append(afresh * 1e3)
        print(
            f"{rate:11g} | {args.picks:5d} | {_figures(new)} | {_figures(old)} | "
            f"{sum(new) / sum(old):.3f}"
        )


def _figures(ms: list[float]) -> str:
    p90 = statistics.quantiles(ms, n=10)[-1]
    return f"{statistics.median(ms):.3f} / {p90:.3f} / {sum(ms):.0f}"


if __name__ == "__main__":
    main()

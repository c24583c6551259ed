"""Runs known held (`kvcache.runs`) read and written from two threads, as in the service:
the tokenizer thread walks (`Reach`, through `PoolCaches.reach`) while the loop applies
stores, removals and clears to the same worker and walks too (`BlockIndex.longest`).

The property, on every interleaving: whenever the loop is between two batches (stores,
removals, clears, restarts, blocks made pending), no run end the worker's `KnownRuns`
would use names a block the worker does not hold (`start` is at most the leading run a
lookup of each block finds), and `longest` answers what the lookup of each block answers;
a walk of the other thread's that no loop action overlapped answers that too; and neither
thread raises. Forced interleavings (a line tracer
holding the walker at a chosen line while the loop acts) check the one window in `found`
where the loop's removal and walk can come between the walker's check and its write.
"""

from __future__ import annotations

import itertools
import random
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from kinference.kvcache.blocks import BlockId, identities
from kinference.kvcache.index import BlockIndex, held_run, leading
from kinference.kvcache.pool import PoolCaches
from kinference.kvcache.runs import KnownRuns
from kinference.kvevents.events import AllBlocksCleared, BlockRemoved, BlockStored

BS = 4
SLOT = 0


class Engine:
    """Prompts sharing heads, stored and evicted as an engine would (hashes of our own)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        head = [rng.randrange(4) for _ in range(BS * rng.randint(4, 20))]
        self.prompts: list[list[int]] = []
        for _ in range(8):
            tail = [rng.randrange(4) for _ in range(BS * rng.randint(1, 30))]
            self.prompts.append([*head, *tail])
        self.blocks = [identities(p, BS) for p in self.prompts]
        self._hashes = itertools.count(1)
        self.named: dict[int, int] = {}  # our engine hash -> identity, as the index keeps it
        self.by_identity: dict[int, int] = {}  # identity -> engine hash

    def store(self) -> BlockStored:
        i = self.rng.randrange(len(self.prompts))
        blocks, tokens = self.blocks[i], self.prompts[i]
        count = self.rng.randint(1, len(blocks))
        hashes = []
        for identity in blocks[:count]:
            found = self.by_identity.get(identity)
            if found is None:
                found = self.by_identity[identity] = next(self._hashes)
                self.named[found] = identity
            hashes.append(found)
        return BlockStored(tuple(hashes), None, tuple(tokens[: count * BS]), BS)

    def remove(self) -> BlockRemoved:
        hashes = sorted(self.named)
        gone = self.rng.sample(hashes, self.rng.randint(1, min(len(hashes), 6)))
        for engine_hash in gone:
            del self.by_identity[self.named.pop(engine_hash)]
        return BlockRemoved(tuple(gone))

    def clear(self) -> AllBlocksCleared:
        self.named.clear()
        self.by_identity.clear()
        return AllBlocksCleared()


def _true_run(held: dict[BlockId, int], blocks: list[BlockId]) -> int:
    return next((i for i, b in enumerate(blocks) if b not in held), len(blocks))


def _check(index: BlockIndex, engine: Engine) -> None:
    held = dict(index.held(SLOT))
    for blocks in engine.blocks:
        truth = _true_run(held, blocks)
        assert index.known(SLOT, blocks) <= truth
        assert index.longest(blocks, [SLOT]) == {SLOT: truth}


def test_walks_on_another_thread_never_leave_a_run_a_removal_cut() -> None:
    rng = random.Random(16)
    engine, pool = Engine(rng), PoolCaches("p", BS)
    stop, errors, walks = threading.Event(), list[BaseException](), [0, 0]
    acting = [0]  # odd while the loop changes the worker (a sequence lock)
    pool.apply(SLOT, [engine.store()])

    def quiet_walk(blocks: list[BlockId]) -> None:
        """A walk no loop action overlapped answers what a lookup of each block does."""
        before = acting[0]
        held, known = pool.index.holdings().get(SLOT, ({}, KnownRuns()))
        end = held_run(held, known, blocks)
        truth = leading(held, blocks)
        if before % 2 == 0 and acting[0] == before:
            assert end == truth
            walks[1] += 1

    def walker() -> None:
        walk = random.Random(60)
        try:
            while not stop.is_set():
                reach = pool.reach()  # as the tokenizer thread takes it, per Pick
                blocks = walk.choice(engine.blocks)
                named = 0
                while named < len(blocks):
                    named = min(len(blocks), named + walk.randint(1, 12))
                    reach(blocks[:named])
                walks[0] += 1
                quiet_walk(walk.choice(engine.blocks))
        except BaseException as exc:  # handed to the test's thread
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread = threading.Thread(target=walker)
    thread.start()
    try:
        for step in range(3000):
            acting[0] += 1
            roll = rng.random()
            if roll < 0.5:
                pool.apply(SLOT, [engine.store()])
            elif roll < 0.97 and engine.named:
                pool.apply(SLOT, [engine.remove()])
            elif roll < 0.985:  # the cache cleared (vLLM's reset_prefix_cache)
                pool.apply(SLOT, [engine.clear(), engine.store()])
            else:  # the engine restarted: the worker forgotten, as `_step` does
                pool.forget(SLOT)
                engine.clear()
            if roll < 0.2:  # a request routed there: its blocks pending (read by `Reach`)
                pool.expect(SLOT, rng.choice(engine.blocks), float(step))
            acting[0] += 1
            if step % 3 == 0:
                _check(pool.index, engine)
            assert not errors
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    assert not errors
    assert walks[0] > 100 and walks[1] > 10  # the walker did run beside the loop


class _HoldAt:
    """A line tracer for one thread: on reaching `line` of the function named `code`, it
    signals `reached` and waits for `resume` (the other thread acts meanwhile)."""

    def __init__(self, code: str, line: int) -> None:
        self.code, self.line = code, line
        self.reached, self.resume = threading.Event(), threading.Event()
        self._done = False

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_name != self.code:
            return None
        return self._local

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and frame.f_lineno == self.line and not self._done:
            self._done = True
            self.reached.set()
            self.resume.wait(5)
        return self._local


def _lines(function: Any) -> Iterator[int]:
    """The line numbers of `function`'s body, in order."""
    code = function.__code__
    return (
        line for _, _, line in code.co_lines() if line is not None and line > code.co_firstlineno
    )


def _held_in_found(line: int, older: bool) -> int:
    """The walker held at `line` of `found` while the loop removes block 10 and walks: how
    long a run of the 20 blocks the worker's known ends then give."""
    blocks = list(range(1, 21))
    held, known = dict.fromkeys(blocks, 1), KnownRuns()
    known.found(blocks[:5], 5, known.removals)
    if older:
        known.removed()
    hold, removals = _HoldAt("found", line), known.removals

    def walker() -> None:
        sys.settrace(hold)
        try:
            known.found(blocks, leading(held, blocks, known.start(blocks)), removals)
        finally:
            sys.settrace(None)
            hold.reached.set()

    thread = threading.Thread(target=walker)
    thread.start()
    assert hold.reached.wait(5)
    del held[blocks[9]]  # the loop: a removal, then its own walk
    known.removed()
    assert held_run(held, known, blocks) == 9
    hold.resume.set()
    thread.join(5)
    return known.start(blocks)


def test_no_interleaving_inside_found_keeps_an_end_a_removal_cut() -> None:
    """For each line of `KnownRuns.found`: the walker (another thread) is held there, its
    walk having found 20 blocks held under the count it read; the loop removes block 10
    and walks again (which keeps its own, shorter run). Whatever line the walker was held
    at, no end past block 9 is usable afterwards (with the ends kept before under the
    walker's count, and under an older one)."""
    for line, older in itertools.product(sorted(set(_lines(KnownRuns.found))), (False, True)):
        assert _held_in_found(line, older) <= 9, (line, older)

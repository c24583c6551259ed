"""Runs a worker is known to hold (`kvcache.runs`): a walk begun past one answers what the
whole walk does, over random stores, removals and prompts sharing prefixes; an end found
under a removal count that moved on is never used; a finished request's touch taken past
one names the blocks a lookup each would."""

from __future__ import annotations

import copy
import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.kvcache.index import held_run, leading
from kinference.kvcache.pool import PoolCaches, Request
from kinference.kvcache.reach import Reach
from kinference.kvcache.runs import MAX_ENDS, KnownRuns
from kinference.kvevents.events import BlockRemoved, BlockStored

BS = 4


class Chains:
    """Block identities that name their whole prefix, as `kvcache.blocks` chains them."""

    def __init__(self) -> None:
        self._names: dict[tuple[int, ...], int] = {}

    def of(self, tokens: list[int]) -> list[int]:
        return [
            self._names.setdefault(tuple(tokens[: i + 1]), len(self._names) + 1)
            for i in range(len(tokens))
        ]


def _prompts(rng: random.Random) -> list[list[int]]:
    """Conversations on a shared head: prompts that share prefixes of several lengths."""
    head = [rng.randrange(3) for _ in range(rng.randint(0, 40))]
    prompts = []
    for _ in range(rng.randint(1, 6)):
        turn = [*head]
        for _ in range(rng.randint(1, 4)):
            turn = [*turn, *(rng.randrange(3) for _ in range(rng.randint(0, 12)))]
            prompts.append(turn)
    return prompts


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**31))
def test_a_walk_past_a_known_run_finds_what_the_whole_walk_does(seed_value: int) -> None:
    rng = random.Random(seed_value)
    chains, held, known = Chains(), dict[int, int](), KnownRuns()
    prompts = [chains.of(p) for p in _prompts(rng)]
    for _ in range(60):
        step = rng.random()
        prompt = rng.choice(prompts)
        if step < 0.35:  # stored: a prompt's head, or any run of it (not its ancestors)
            start = rng.randrange(len(prompt) + 1) if rng.random() < 0.2 else 0
            held.update(dict.fromkeys(prompt[start : rng.randint(start, len(prompt))], 1))
        elif step < 0.5 and held:  # removed: any blocks, a tail or from the middle
            for gone in rng.sample(sorted(held), rng.randint(1, min(len(held), 5))):
                del held[gone]
            known.removed()
        else:
            cut = prompt[: rng.randint(0, len(prompt))]
            assert held_run(held, known, cut) == leading(held, cut)


def test_an_end_found_before_a_removal_is_not_used() -> None:
    """The tokenizer thread's walk read the count, then the loop removed a block: what the
    walk found is not kept; and ends kept are forgotten at the next removal."""
    blocks, known = list(range(1, 101)), KnownRuns()
    held = dict.fromkeys(blocks, 1)
    removals = known.removals
    del held[50]
    known.removed()
    known.found(blocks, 100, removals)  # found before the removal: not kept
    assert known.start(blocks) == 0
    assert held_run(held, known, blocks) == 49
    assert known.start(blocks) == 49
    del held[10]
    known.removed()
    assert known.start(blocks) == 0
    assert held_run(held, known, blocks) == 9


def test_the_newest_ends_are_kept() -> None:
    known = KnownRuns()
    prompts = [[1000 + i, *range(10 * i + 1, 10 * i + 6)] for i in range(MAX_ENDS + 5)]
    for prompt in prompts:
        known.found(prompt, len(prompt), known.removals)
    assert known.start(prompts[0]) == 0  # the oldest ends dropped
    assert known.start(prompts[-1]) == len(prompts[-1])
    assert known.start([*prompts[-1], 7, 8]) == len(prompts[-1])
    assert known.start(prompts[-1][:-1]) == 0  # not an end known


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**31))
def test_reach_with_known_runs_answers_as_without(seed_value: int) -> None:
    """A prompt named a few blocks at a time, as the tokenizer names them."""
    rng = random.Random(seed_value)
    chains, known = Chains(), KnownRuns()
    prompts = [chains.of(p) for p in _prompts(rng)]
    held = dict.fromkeys(rng.choice(prompts), 1)
    pending = dict.fromkeys(rng.choice(prompts)[: rng.randint(0, 30)], 1.0)
    for _ in range(6):
        prompt = rng.choice(prompts)
        with_known, without = Reach([(0, held, pending, known)]), Reach([(0, held, pending, None)])
        named = 0
        while named < len(prompt):
            named = min(len(prompt), named + rng.randint(1, 9))
            assert with_known(prompt[:named]) == without(prompt[:named])
        held.update(dict.fromkeys(prompt[: rng.randint(0, len(prompt))], 1))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**31))
def test_a_finished_request_touches_the_blocks_held_as_a_lookup_each_would(seed_value: int) -> None:
    """`PoolCaches.finished` takes its prompt's head known held (`BlockIndex.known`) without
    looking each block up: the touch is of the blocks the worker holds, in order, all the
    same; after removals (from the middle too) as well."""
    rng = random.Random(seed_value)
    pool, hashes = PoolCaches("p", BS), itertools.count(1)
    tokens = [rng.randrange(5) for _ in range(BS * rng.randint(1, 40))]
    blocks = identities(tokens, BS)
    stored = rng.randint(1, len(blocks))
    named = [next(hashes) for _ in range(stored)]
    pool.apply(0, [BlockStored(tuple(named), None, tuple(tokens[: BS * stored]), BS)])
    pool.index.longest(blocks[: rng.randint(0, len(blocks))], [0])  # a Pick's match
    if rng.random() < 0.5:  # evicted since, from anywhere
        pool.apply(0, [BlockRemoved(tuple(rng.sample(named, rng.randint(1, len(named)))))])
    pool.sent(0, PromptBlocks(len(tokens), BS, tuple(blocks)), 0, Request(1, 0, 0.0))
    expected = copy.deepcopy(pool.ages[0])
    held = pool.index.held(0)
    expected.touch(list(filter(held.__contains__, blocks)))
    pool.finished(0, 1)
    ages = pool.ages[0]
    assert (ages.touched, ages.live, ages.alias) == (
        expected.touched,
        expected.live,
        expected.alias,
    )

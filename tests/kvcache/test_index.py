"""The token-block index: identities independent of the engine's hashes, longest prefixes,
removals and clears, and the same answer as a brute-force model over random event streams."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.kvcache.blocks import chain, contents, identities, seed
from kinference.kvcache.index import EXACT_BLOCKS, MAX_WINDOW, BlockIndex, leading
from kinference.kvevents.events import AllBlocksCleared, BlockRemoved, BlockStored

BS = 4


def stored(hashes: list[int], tokens: list[int], parent: int | None = None) -> BlockStored:
    return BlockStored(tuple(hashes), parent, tuple(tokens), BS)


def test_identities_chain_and_ignore_the_partial_block() -> None:
    tokens = list(range(10))
    named = identities(tokens, BS)
    assert len(named) == 2
    assert named == chain(seed(None), contents(tokens, BS))
    # Block 1's identity follows from block 0's and block 1's tokens alone.
    assert chain(named[0], contents(tokens[4:8], BS)) == [named[1]]
    # ... which is what continuing a chain from a parent computes (prompts in pieces, events).
    assert identities(tokens[4:8], BS, parent=named[0]) == [named[1]]
    long = list(range(4000))
    assert identities(long, BS) == chain(seed(None), contents(long, BS))
    assert (
        identities(long[400:], BS, parent=identities(long[:400], BS)[-1])
        == (identities(long, BS)[100:])
    )
    # Order within a block matters, and the adapter seeds the chain.
    assert identities([1, 2, 3, 4], BS) != identities([2, 1, 3, 4], BS)
    assert identities([1, 2, 3, 4], BS, "sql") != identities([1, 2, 3, 4], BS)
    assert identities(np.arange(8, dtype=np.uint32), BS) == identities(list(range(8)), BS)


def test_engines_with_different_hash_seeds_name_blocks_alike() -> None:
    index = BlockIndex()
    tokens = list(range(12))
    index.apply(0, [stored([101, 102, 103], tokens)])
    index.apply(1, [stored([9001], tokens[:4]), stored([9002], tokens[4:8], parent=9001)])
    prompt = identities([*tokens, 99], BS)
    assert index.longest(prompt, [0, 1, 2]) == {0: 3, 1: 2, 2: 0}


def test_removed_blocks_shorten_the_prefix_and_clear_forgets() -> None:
    index = BlockIndex()
    tokens = list(range(12))
    index.apply(0, [stored([1, 2, 3], tokens)])
    index.apply(0, [BlockRemoved((2,))])
    assert index.longest(identities(tokens, BS), [0]) == {0: 1}  # block 2 gone: 1 left
    index.apply(0, [AllBlocksCleared()])
    assert index.longest(identities(tokens, BS), [0]) == {0: 0}
    assert len(index) == 0


def test_unknown_parent_is_skipped_and_counted() -> None:
    index = BlockIndex()
    index.apply(0, [stored([5], [1, 2, 3, 4], parent=777)])
    assert index.orphans(0) == 1 and index.blocks(0) == 0


def test_other_media_are_not_the_prefix_cache() -> None:
    index = BlockIndex()
    index.apply(0, [BlockStored((1,), None, (1, 2, 3, 4), BS, None, "CPU")])
    assert index.blocks(0) == 0
    index.apply(0, [stored([1], [1, 2, 3, 4])])
    index.apply(0, [BlockRemoved((1,), "CPU")])  # the CPU copy went, the GPU one stays
    assert index.blocks(0) == 1


def test_a_block_stored_twice_and_a_reused_engine_hash() -> None:
    index = BlockIndex()
    index.apply(0, [stored([1], [1, 2, 3, 4]), stored([1], [1, 2, 3, 4])])
    assert index.blocks(0) == 1
    index.apply(0, [stored([1], [5, 6, 7, 8])])  # hash 1 now names other tokens
    assert index.longest(identities([1, 2, 3, 4], BS), [0]) == {0: 0}
    assert index.longest(identities([5, 6, 7, 8], BS), [0]) == {0: 1}


def test_bounded_per_worker() -> None:
    index = BlockIndex(max_blocks_per_worker=2)
    index.apply(0, [stored([1, 2, 3], list(range(12)))])
    assert index.blocks(0) == 2 and index.orphans(0) == 1


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31))
def test_matches_a_brute_force_model(seed_value: int) -> None:
    """Random stores and removals over a few prompts on 3 workers: the index's answer, asked
    after every step (so through the runs it knows held, `kvcache.runs`), is the longest
    prefix whose blocks the worker holds, computed naively."""
    rng = random.Random(seed_value)
    prompts = [[rng.randrange(50) for _ in range(16)] for _ in range(3)]
    prompts.append(prompts[0][:8] + [rng.randrange(50) for _ in range(8)])  # shares 2 blocks
    index = BlockIndex()
    held: dict[int, dict[int, tuple[int, ...]]] = {w: {} for w in range(3)}  # hash -> tokens
    next_hash = iter(range(1, 10_000))
    engine_names: dict[tuple[int, tuple[int, ...]], int] = {}
    for _ in range(30):
        worker = rng.randrange(3)
        if rng.random() < 0.7:
            prompt = rng.choice(prompts)
            count = rng.randint(1, 4)
            hashes, parent = [], None
            for i in range(count):
                key = (worker, tuple(prompt[: (i + 1) * BS]))
                hashes.append(engine_names.setdefault(key, next(next_hash)))
            start = rng.randrange(count)
            if start:
                parent = hashes[start - 1]
                if parent not in held[worker]:
                    continue
            index.apply(worker, [stored(hashes[start:], prompt[start * BS : count * BS], parent)])
            for i in range(start, count):
                held[worker][hashes[i]] = tuple(prompt[: (i + 1) * BS])
        elif held[worker]:
            victim = rng.choice(sorted(held[worker]))
            index.apply(worker, [BlockRemoved((victim,))])
            del held[worker][victim]
        for prompt in rng.sample(prompts, len(prompts)):
            expected = {}
            for worker in range(3):
                prefixes = set(held[worker].values())
                depth = 0
                while depth < 4 and tuple(prompt[: (depth + 1) * BS]) in prefixes:
                    depth += 1
                expected[worker] = depth
            assert index.longest(identities(prompt, BS), range(3)) == expected


def test_past_the_exact_walk_a_binary_search() -> None:
    index = BlockIndex()
    tokens = list(range(BS * (EXACT_BLOCKS + 300)))
    index.apply(
        0, [stored(list(range(1, EXACT_BLOCKS + 101)), tokens[: BS * (EXACT_BLOCKS + 100)])]
    )
    index.apply(1, [stored([7], tokens[:BS])])
    prompt = identities(tokens, BS)
    assert index.longest(prompt, [0, 1, 2]) == {0: EXACT_BLOCKS + 100, 1: 1, 2: 0}
    assert index.longest(prompt[:EXACT_BLOCKS], [0]) == {0: EXACT_BLOCKS}


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 3 * MAX_WINDOW),
    st.sets(st.integers(0, 3 * MAX_WINDOW)),
    st.integers(0, 3 * MAX_WINDOW),
)
def test_leading_in_bounded_windows_finds_the_first_block_not_held(
    length: int, missing: set[int], start: int
) -> None:
    blocks = list(range(length))
    held = dict.fromkeys(b for b in blocks if b not in missing)
    expected = next((i for i in range(start, length) if blocks[i] not in held), max(start, length))
    assert leading(held, blocks, start) == expected

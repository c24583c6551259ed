"""Prefix-cache affinity: chained block hashes and the per-worker LRU index."""

from __future__ import annotations

import gc
import random
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import pytest

from kinference.routing import PrefixIndex
from kinference.routing.blocks import SEPARATOR, block_hashes

BLOCK = 64


def hashes(text: str, model: str = "m", *, max_blocks: int = 1024, block: int = BLOCK) -> list[int]:
    return block_hashes(model, (text,), block_bytes=block, max_blocks=max_blocks)


def text(blocks: int, fill: str = "a", tail: str = "") -> str:
    return fill * (BLOCK * blocks) + tail


# --- block_hashes ------------------------------------------------------------------------


def test_one_hash_per_full_block() -> None:
    assert hashes("") == []
    assert hashes("x" * (BLOCK - 1)) == []  # a partial block is left out
    assert len(hashes("x" * BLOCK)) == 1
    assert len(hashes("x" * (2 * BLOCK + 63))) == 2
    assert hashes("x" * (2 * BLOCK + 63)) == hashes("x" * 2 * BLOCK)
    assert all(0 <= h < 2**64 for h in hashes(text(5)))


def test_same_prefix_same_leading_hashes() -> None:
    base = "".join(chr(ord("a") + i % 26) for i in range(3 * BLOCK))
    longer = hashes(base + "more text after the shared prefix" * 10)
    assert longer[:3] == hashes(base)
    assert len(longer) > 3


def test_hashes_are_chained() -> None:
    original = hashes(text(4))
    # A change in block 2 changes blocks 2 and 3 only; a change in block 0 changes all.
    late = hashes(text(2) + "b" + "a" * (2 * BLOCK - 1))
    assert late[:2] == original[:2]
    assert late[2] != original[2]
    assert late[3] != original[3]
    early = hashes("b" + text(4)[1:])
    assert all(e != o for e, o in zip(early, original, strict=True))
    # Equal blocks at different positions hash differently: the chain includes the past.
    assert len(set(original)) == 4


def test_seeded_by_model() -> None:
    assert hashes(text(3), "llama") != hashes(text(3), "qwen")
    assert hashes(text(3), "llama")[0] != hashes(text(3), "qwen")[0]
    assert hashes(text(3), "llama") == hashes(text(3), "llama")


def test_segment_splits_differ() -> None:
    def of(*segments: str) -> list[int]:
        return block_hashes("m", segments, block_bytes=4, max_blocks=100)

    assert of("ab", "cdefgh") != of("abc", "defgh")
    assert of("abcd", "efgh") != of("abcdefgh")
    assert of("abcd", "efgh") == of(f"abcd{SEPARATOR}efgh")  # the separator is the split
    assert of("abc", "de")[:1] == of("abc", "xy")[:1]


def test_max_blocks_cap() -> None:
    full = hashes(text(10))
    assert hashes(text(10), max_blocks=3) == full[:3]
    assert hashes(text(10), max_blocks=10) == full
    assert hashes(text(10), max_blocks=50) == full


def test_block_size_is_in_utf8_bytes() -> None:
    # 64 three-byte characters are 192 bytes: three blocks.
    assert len(hashes("\u20ac" * 64)) == 3
    # A lone surrogate does not raise.
    assert len(hashes("\ud800" * 64)) == 3


def test_hash_values_are_stable() -> None:
    # Replicas and versions share these values (Redis): a faster computation must give the
    # same bits. Whole 8-byte words (64-byte blocks) and padded ones (12-byte blocks).
    notes = ("hello world, these are the notes; " * 4, "and a question")
    assert block_hashes("m", notes, block_bytes=64, max_blocks=8) == [
        1650670280505774128,
        1297896106310086555,
    ]
    assert block_hashes("m", ("abcdefghijklmnopqrstuvwxyz",), block_bytes=12, max_blocks=8) == [
        11341213421026634288,
        15070223166800512834,
    ]


# --- PrefixIndex -------------------------------------------------------------------------


def test_match_longest_prefix_per_worker() -> None:
    index = PrefixIndex(blocks_per_worker=100)
    prompt = hashes(text(6))
    index.record(1, prompt[:2])
    index.record(2, prompt[:5])
    index.record(3, prompt)
    assert index.match(prompt) == {1: 2, 2: 5, 3: 6}
    assert index.match(prompt[:3]) == {1: 2, 2: 3, 3: 3}
    assert index.match([]) == {}
    assert index.match(hashes(text(6, fill="z"))) == {}
    assert len(index) == 6  # distinct blocks, shared among workers


def test_match_needs_the_first_block() -> None:
    index = PrefixIndex(blocks_per_worker=100)
    prompt = hashes(text(4))
    other = hashes(text(4, fill="q"))
    index.record(7, other)
    assert index.match(prompt) == {}
    # A prompt that diverges after block 1: worker 7 holds only the shared block.
    shared = hashes(text(1, fill="q") + text(3, fill="r"))
    assert index.match(shared) == {7: 1}


def test_lru_keeps_the_earliest_blocks() -> None:
    index = PrefixIndex(blocks_per_worker=4)
    prompt = hashes(text(6))
    index.record(0, prompt)  # more than fits: the trailing blocks go
    assert index.match(prompt) == {0: 4}
    assert len(index) == 4
    other = hashes(text(2, fill="b"))
    index.record(0, other)  # evicts the least recent: blocks 3 and 2 of the first prompt
    assert index.match(prompt) == {0: 2}
    assert index.match(other) == {0: 2}
    index.record(0, prompt[:2])  # refreshed: now `other` is the oldest
    index.record(0, hashes(text(2, fill="c")))
    assert index.match(prompt) == {0: 2}
    assert index.match(other) == {}


def test_eviction_is_per_worker() -> None:
    index = PrefixIndex(blocks_per_worker=2)
    prompt = hashes(text(2))
    index.record(0, prompt)
    index.record(1, prompt)
    index.record(1, hashes(text(2, fill="b")))
    assert index.match(prompt) == {0: 2}
    assert len(index) == 4


def test_forget() -> None:
    index = PrefixIndex(blocks_per_worker=10)
    prompt = hashes(text(3))
    index.record(0, prompt)
    index.record(1, prompt[:1])
    index.forget(0)
    assert index.match(prompt) == {1: 1}
    assert len(index) == 1
    index.forget(0)  # again: nothing held
    index.forget(99)
    index.forget(1)
    assert index.match(prompt) == {}
    assert len(index) == 0


class ReferenceIndex:
    """The obvious implementation: an LRU list per worker, matched block by block."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.lru: dict[int, OrderedDict[int, None]] = {}

    def record(self, slot: int, blocks: Sequence[int]) -> None:
        lru = self.lru.setdefault(slot, OrderedDict())
        for block in reversed(blocks):
            lru[block] = None
            lru.move_to_end(block)
        while len(lru) > self.capacity:
            lru.popitem(last=False)

    def match(self, blocks: Sequence[int]) -> dict[int, int]:
        result = {}
        for slot, lru in self.lru.items():
            count = 0
            while count < len(blocks) and blocks[count] in lru:
                count += 1
            if count:
                result[slot] = count
        return result


@pytest.mark.parametrize("seed", range(20))
def test_match_agrees_with_a_reference(seed: int) -> None:
    """Prompts built from a small tree of shared prefixes, recorded at random on few
    workers with small LRUs: the binary search finds what a block-by-block walk finds."""
    rng = random.Random(seed)
    capacity = rng.choice([3, 5, 8, 20])
    index, reference = PrefixIndex(capacity), ReferenceIndex(capacity)
    stems = ["".join(rng.choice("ab") for _ in range(rng.randint(0, 6))) for _ in range(12)]
    prompts = [hashes("".join(c * BLOCK for c in stem)) for stem in stems]
    for _ in range(200):
        slot = rng.randrange(4)
        prompt = rng.choice(prompts)
        index.record(slot, prompt)
        reference.record(slot, prompt)
        probe = rng.choice(prompts)
        assert index.match(probe) == reference.match(probe)
    if rng.random() < 0.5:
        index.forget(0)
        reference.lru.pop(0, None)
    for probe in prompts:
        assert index.match(probe) == reference.match(probe)


def test_hasher_gives_block_hashes_and_remembers_them() -> None:
    from kinference.routing.blocks import PrefixHasher, block_hashes

    hasher = PrefixHasher(capacity=2)
    system = "You are a careful assistant. " * 40
    for question in ("first", "second", "third"):
        segments = (system, f"user: {question}")
        expected = block_hashes("m", segments, block_bytes=64, max_blocks=8)
        assert hasher.hashes("m", segments, block_bytes=64, max_blocks=8) == tuple(expected)
    # The first 8 blocks lie in the shared system prompt: one entry serves every question.
    assert len(hasher._cache) == 1
    assert hasher.hashes("other", (system,), block_bytes=64, max_blocks=8) != tuple(expected)
    hasher.hashes("m", ("x" * 600,), block_bytes=64, max_blocks=8)
    assert len(hasher._cache) == 2  # capacity bounds the cache


def test_held_after_match_agrees_with_a_fresh_lookup_whatever_changed_between() -> None:
    index = PrefixIndex(1000)
    hashes = tuple(range(1, 21))
    index.record(0, hashes)
    index.record(1, hashes[:5])
    assert index.match(hashes) == {0: 20, 1: 5}
    assert index.held(1, hashes) == (5, 4)  # its deepest block, 4 recorded since
    index.record(1, hashes[:12])  # a change after the match: not the memo's answer
    assert index.held(1, hashes)[0] == 12
    index.forget(0)  # (a shortfall no longer drops blocks: h101)
    assert index.held(0, hashes) == (0, None)
    index.record(0, hashes)
    before = index.held(0, hashes)
    index.record(0, hashes)  # the same blocks again right away: nothing moves
    assert index.held(0, hashes) == before == (20, 19)


def test_indexed_blocks_leave_the_collector_nothing_to_walk() -> None:
    """A full collection walks every object the collector tracks, on the event loop's
    thread: the index must not add one per block (a set of holders each was 20-30 ms of
    stall at ~70k blocks)."""
    index = PrefixIndex(blocks_per_worker=10_000)
    gc.collect()
    before = len(gc.get_objects())
    for slot in range(3):
        index.record(slot, list(range(slot * 1000, slot * 1000 + 5000)))  # shared blocks too
    index.shortfall(0, list(range(5000)), 2000, None)
    gc.collect()
    assert len(index) == 7000
    assert len(gc.get_objects()) - before < 1000  # a set per block would add 7,000


@pytest.mark.parametrize("seed", range(30))
def test_records_applied_later_leave_every_reader_what_eager_ones_would(seed: int) -> None:
    rng = random.Random(seed)
    capacity = rng.choice([3, 5, 8, 20])
    eager, later = PrefixIndex(capacity), PrefixIndex(capacity)
    stems = ["".join(rng.choice("ab") for _ in range(rng.randint(0, 6))) for _ in range(12)]
    prompts = [tuple(hashes("".join(c * BLOCK for c in stem))) for stem in stems]
    for _ in range(300):
        slot, prompt, probe = rng.randrange(4), rng.choice(prompts), rng.choice(prompts)
        step = rng.random()
        if step < 0.5:  # a Pick's own record, applied later or at the next read
            eager.record(slot, prompt)
            later.record_later(slot, prompt)
            if rng.random() < 0.3:
                later.flush()
        elif step < 0.6:  # another replica's, applied at once
            eager.record(slot, prompt)
            later.record(slot, prompt)
        elif step < 0.8:
            kept, age = rng.randint(0, len(prompt)), rng.choice([None, 1, 4, 30])
            eager.shortfall(slot, prompt, kept, age)
            later.shortfall(slot, prompt, kept, age)
        elif step < 0.9:
            age = rng.choice([None, 3, 50])
            eager.confirmed(slot, age)
            later.confirmed(slot, age)
        elif step < 0.95:
            eager.forget(slot)
            later.forget(slot)
        if rng.random() < 0.5:  # else records pile up until a later read or change
            continue
        assert later.match(probe) == eager.match(probe)
        assert later.held(slot, probe) == eager.held(slot, probe)
        slots = np.arange(4)
        assert later.footprint(slots) == eager.footprint(slots)
        assert len(later) == len(eager) and later.capacity == eager.capacity

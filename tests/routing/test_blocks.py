"""`PrefixHasher` continues a family's chain: the same hashes as hashing from scratch."""

from __future__ import annotations

import random
import sys

import pytest

from kinference.routing.blocks import (
    MAX_INTERNED_BYTES,
    MAX_KNOWN_BYTES,
    MAX_KNOWN_SEGMENTS,
    SEPARATOR,
    PrefixHasher,
    block_hashes,
)
from tests.routing.spelled_chain import spelled_out


def reference(
    model: str, segments: tuple[str, ...], block_bytes: int, max_blocks: int
) -> list[int]:
    """The chain spelled out block by block (no `<text:` references in `segments`)."""
    data = SEPARATOR.join(segments).encode("utf-8", "surrogatepass")[: block_bytes * max_blocks]
    return list(spelled_out(model, data, block_bytes, min(len(data) // block_bytes, max_blocks)))


def prompts(rng: random.Random, count: int) -> list[tuple[str, ...]]:
    """Families of prompts: extended, cut short, their last segments replaced."""
    letters = rng.choice(["ab", "abé", "a\x1eb", "aé\U0001f600"])
    pool = ["".join(rng.choice(letters) for _ in range(rng.randint(0, 300))) for _ in range(6)]
    pool.append("a" * 130)
    made: list[tuple[str, ...]] = []
    for _ in range(count):
        if made and rng.random() < 0.7:
            base = list(rng.choice(made[-5:]))
            kept = base[: rng.randint(0, len(base))]
            grown = [rng.choice(pool) + "q" * rng.randint(0, 90) for _ in range(rng.randint(0, 2))]
            made.append((*kept, *grown))
        else:
            made.append(tuple(rng.choice(pool) for _ in range(rng.randint(0, 4))))
    return made


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("seed_value", range(40))
def test_continued_hashes_equal_hashes_from_scratch(seed_value: int, native: bool) -> None:
    """Either chain form (the C one where built, tests/native holds it to the pure one)."""
    rng = random.Random(seed_value)
    bound = rng.choice([0, 600, 3000, MAX_KNOWN_BYTES])
    interned = rng.choice([0, 500, 4000, MAX_INTERNED_BYTES])
    hasher = PrefixHasher(
        capacity=rng.choice([1, 4, 16, 512]),
        max_known_bytes=bound,
        max_interned_bytes=interned,
        native=native,
    )
    block_bytes, max_blocks = rng.choice([8, 13, 64, 64]), rng.choice([2, 7, 40, 1024])
    for segments in prompts(rng, 150):
        model = rng.choice(["m", "m", "n"])
        got = hasher.hashes(model, segments, block_bytes=block_bytes, max_blocks=max_blocks)
        assert 0 <= hasher.known_bytes <= bound
        assert 0 <= hasher.interned_bytes <= interned
        assert list(got) == reference(model, segments, block_bytes, max_blocks)
        assert list(got) == block_hashes(
            model, segments, block_bytes=block_bytes, max_blocks=max_blocks
        )


def test_text_references_expand_alike_when_continued() -> None:
    hasher = PrefixHasher()
    document = "<text:9000:0123abcd> and then some words " * 3
    for question in ("one", "two, longer" * 20, "three"):
        segments = (document, f"user: {question}")
        expected = block_hashes("m", segments, block_bytes=64, max_blocks=1024)
        assert list(hasher.hashes("m", segments, block_bytes=64, max_blocks=1024)) == expected


def test_one_tuple_per_prefix_and_shared_leading_hashes() -> None:
    hasher = PrefixHasher()
    document = "système: " + "a long shared document. " * 400
    first = hasher.hashes("m", (document, "user: what? " * 20), block_bytes=64, max_blocks=1024)
    other = hasher.hashes("m", (document, "user: and why? " * 20), block_bytes=64, max_blocks=1024)
    again = hasher.hashes("m", (document, "user: what? " * 20), block_bytes=64, max_blocks=1024)
    assert again is first  # the prefix index skips a prompt recorded again by identity
    assert other != first
    # The document's blocks are the same int objects: dict lookups in the index find them
    # by identity before comparing values.
    shared = len(document.encode()) // 64
    assert all(a is b for a, b in zip(first[:shared], other[:shared], strict=True))


def test_a_family_pins_no_more_of_a_request_than_it_hashes() -> None:
    """A long segment is kept cut at the hashed length and a prompt of very many segments
    not at all: the request's own strings are not held past its Pick (refcounts)."""
    hasher = PrefixHasher()
    huge = "x" + "long text " * 200_000  # 2 MB, hashed as far as 64 KiB
    before = sys.getrefcount(huge)
    cut = hasher.hashes("m", (huge,), block_bytes=64, max_blocks=1024)
    assert sys.getrefcount(huge) == before
    assert hasher.hashes("m", (huge,), block_bytes=64, max_blocks=1024) == cut
    many = tuple(f"message {i}" for i in range(MAX_KNOWN_SEGMENTS + 1))
    counts = [sys.getrefcount(s) for s in many]
    expected = block_hashes("m", many, block_bytes=64, max_blocks=1024)
    assert list(hasher.hashes("m", many, block_bytes=64, max_blocks=1024)) == expected
    assert [sys.getrefcount(s) for s in many] == counts
    short = ("a system prompt", "user: hi")
    counts = [sys.getrefcount(s) for s in short]
    hasher.hashes("m", short, block_bytes=4, max_blocks=1024)
    assert [sys.getrefcount(s) for s in short] == [c + 1 for c in counts]  # kept as is


def test_families_of_long_wide_prompts_pin_no_more_than_the_bound() -> None:
    """128 families of 64 KiB prompts in 4-byte characters would pin ~90 MB: the families
    kept stay within `max_known_bytes`, counted as CPython sizes their strings, and the
    hashes of a forgotten family's next prompt are the same."""
    hasher = PrefixHasher()
    prompts = [(f"{i:04d}" + "\U0001f600 wide text " * 5000, "user: q") for i in range(128)]
    sizes = [sum(map(sys.getsizeof, p)) for p in prompts]
    assert sum(sizes) > MAX_KNOWN_BYTES  # the bound is what keeps the families small
    for segments in prompts:
        hasher.hashes("m", segments, block_bytes=64, max_blocks=1024)
        assert hasher.known_bytes <= MAX_KNOWN_BYTES
    assert hasher.known_bytes > MAX_KNOWN_BYTES // 2  # the bound is used, not everything dropped
    first = prompts[0]
    expected = block_hashes("m", first, block_bytes=64, max_blocks=1024)
    assert list(hasher.hashes("m", first, block_bytes=64, max_blocks=1024)) == expected


def test_the_tuples_handed_out_pin_no_more_than_the_bound() -> None:
    """512 distinct prompts of 10k blocks would keep ~200 MB of hashes in the tuples handed
    out: they stay within `max_interned_bytes`, the latest prompt's tuple is still the one
    handed out again, and one longer than the whole bound is handed out but not kept."""
    hasher = PrefixHasher()
    for i in range(48):
        segments = (f"{i:04d}" + "text " * 130_000,)  # ~650 KB: 10k blocks of 64 bytes
        first = hasher.hashes("m", segments, block_bytes=64, max_blocks=10_000)
        assert hasher.interned_bytes <= MAX_INTERNED_BYTES
        assert hasher.hashes("m", segments, block_bytes=64, max_blocks=10_000) is first
    assert hasher.interned_bytes > MAX_INTERNED_BYTES // 2  # the bound is used
    small = PrefixHasher(max_interned_bytes=1000)
    long_prompt = ("a" * 64 * 100,)  # 100 hashes, past 1000 bytes
    got = small.hashes("m", long_prompt, block_bytes=64, max_blocks=1024)
    assert small.interned_bytes == 0
    assert list(got) == block_hashes("m", long_prompt, block_bytes=64, max_blocks=1024)

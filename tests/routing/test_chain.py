"""The chain's two forms (numpy over all blocks, Python integers block by block) agree."""

from __future__ import annotations

import random

import numpy as np
import pytest

from kinference.routing.chain import (
    chain_values,
    hashes_python,
    mix,
    mix64,
    mix64_into,
    parted,
    seed,
    unmix,
)


def test_mix_is_mix64_and_unmix_undoes_it() -> None:
    rng = random.Random(1)
    values = [0, 1, 2**63, 2**64 - 1, *(rng.getrandbits(64) for _ in range(500))]
    array = np.array(values, dtype=np.uint64)
    assert [mix(value) for value in values] == mix64(array).tolist()
    assert [unmix(mix(value)) for value in values] == values


@pytest.mark.parametrize("seed_value", range(20))
def test_python_blocks_continue_the_numpy_chain(seed_value: int) -> None:
    rng = random.Random(seed_value)
    count = rng.randint(2, 40)
    data = rng.randbytes(64 * count + rng.randint(0, 63))
    whole = chain_values("m", data, 64, count)
    start = rng.randint(1, count - 1)
    before = int(whole[start - 1])
    expected = mix64(whole).tolist()[start:]
    assert hashes_python(data, start, count, before) == expected
    continued = chain_values("m", data, 64, count, start=start, before=before)
    assert mix64_into(continued).tolist() == expected
    assert unmix(mix64(whole).tolist()[start - 1]) == before


def test_the_first_block_takes_the_model_seed() -> None:
    data = bytes(range(64))
    assert chain_values("a", data, 64, 1).tolist() != chain_values("b", data, 64, 1).tolist()
    assert seed("a") == seed("a")


def test_parted_finds_where_two_chains_part_as_a_scan_does() -> None:
    rng = random.Random(7)
    for _ in range(500):
        common = rng.randrange(0, 40)
        shift = rng.randrange(0, 5)
        first = [rng.randrange(1 << 20) for _ in range(shift)] + list(range(common))
        first += [-1 - i for i in range(rng.randrange(0, 10))]
        second = list(range(common)) + [-100 - i for i in range(rng.randrange(0, 10))]
        hi = min(len(first) - shift, len(second))
        lo = rng.randrange(0, min(common, hi) + 1)
        assert parted(first, second, lo, hi, shift=shift) == min(common, hi)

"""Body and response ids: random, non-zero, never one that is still in use."""

from __future__ import annotations

import itertools

import pytest

from kinference.bodies import ids
from kinference.bodies.ids import new_id


def test_ids_are_non_zero_distinct_and_not_sequential() -> None:
    drawn = [new_id(()) for _ in range(2000)]
    assert all(0 < value < 1 << 64 for value in drawn)
    assert len(set(drawn)) == len(drawn)
    steps = {b - a for a, b in itertools.pairwise(drawn)}
    assert len(steps) > 1000  # a counter would show one step over and over
    assert max(drawn).bit_length() > 60  # spread over the whole 64-bit space


def test_zero_and_ids_in_use_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    draws = iter([0, 7, 0, 7, 42])
    monkeypatch.setattr(ids.secrets, "randbits", lambda bits: next(draws))
    assert new_id({7}) == 42


def test_draws_64_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []

    def randbits(bits: int) -> int:
        seen.append(bits)
        return 5

    monkeypatch.setattr(ids.secrets, "randbits", randbits)
    assert new_id(()) == 5
    assert seen == [64]

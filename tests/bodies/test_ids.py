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
    monkeypatch.setattr(ids._entropy, "draw", lambda: next(draws))
    assert new_id({7}) == 42


def test_draws_64_bits_of_the_os_csprng_a_few_hundred_bytes_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[int] = []
    stream = itertools.count()

    def urandom(size: int) -> bytes:
        asked.append(size)
        return bytes(next(stream) % 256 for _ in range(size))

    monkeypatch.setattr(ids.os, "urandom", urandom)
    entropy = ids._Entropy()
    drawn = [entropy.draw() for _ in range(130)]
    assert asked == [512, 512, 512]  # 64 ids a call
    assert drawn[0] == int.from_bytes(bytes(range(8)), "little")
    assert drawn[64] == int.from_bytes(bytes(range(8)), "little")  # the second 512 bytes
    entropy.forget()  # as a forked child does: nothing of the parent's bytes is reused
    entropy.draw()
    assert asked == [512, 512, 512, 512]

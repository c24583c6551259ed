"""TTFT and layout-1 inter-token buckets on a controlled clock."""

from __future__ import annotations

import pytest

from kinference import itl_layout
from kinference.gateway.timing import TokenClock
from tests.clock import FakeClock


@pytest.mark.parametrize(
    ("gap_ms", "bucket"),
    [(0, 0), (5, 0), (5.01, 1), (10, 1), (20, 3), (20.5, 4), (75, 7), (1000, 13), (1000.1, 14)],
)
def test_buckets_are_upper_inclusive(gap_ms: float, bucket: int) -> None:
    assert itl_layout.bucket(gap_ms) == bucket


def test_layout_1_has_15_buckets() -> None:
    assert itl_layout.BUCKETS == 15
    assert itl_layout.bucket(10**9) == 14


def test_first_token_sets_ttft_and_later_ones_fill_gaps() -> None:
    clock = FakeClock(100.0)
    tokens = TokenClock(clock)
    clock.now += 0.250
    assert tokens.token() is True
    assert tokens.ttft_ms == 250
    assert tokens.itl_bucket_counts == []  # one token: no gap yet (spec)
    for gap_s in (0.004, 0.012, 2.0):
        clock.now += gap_s
        assert tokens.token() is False
    counts = tokens.itl_bucket_counts
    assert len(counts) == 15 and sum(counts) == 3
    assert counts[0] == counts[2] == counts[14] == 1
    assert tokens.tokens == 4
    assert tokens.ttft_ms == 250


def test_first_byte_counts_once() -> None:
    clock = FakeClock(100.0)
    tokens = TokenClock(clock)
    clock.now += 0.010
    tokens.first_byte()
    clock.now += 5
    tokens.first_byte()
    assert tokens.ttft_ms == 10
    assert tokens.itl_bucket_counts == []

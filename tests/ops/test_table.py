"""The time left of a Redis key, as `kinference state` and `kinference blacklist list` show it."""

from __future__ import annotations

import pytest

from kinference.ops.table import ttl_text


@pytest.mark.parametrize(
    ("ttl_ms", "shown"),
    [
        (-1, "forever"),  # set by hand, no TTL
        (0, "0.0s"),
        (12_500, "12.5s"),
        (59_949, "59.9s"),
        (60_000, "1m00s"),
        (299_000, "4m59s"),
        (3_599_999, "59m59s"),
        (3_600_000, "1h00m"),  # the state table showed `60m00s` here, the blacklist list this
        (3_720_000, "1h02m"),
        (90_000_000, "25h00m"),
    ],
)
def test_ttl_text(ttl_ms: int, shown: str) -> None:
    assert ttl_text(ttl_ms) == shown

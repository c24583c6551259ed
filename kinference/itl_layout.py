"""ITL layout 1 of ReportFinalTokenRequest.itl_bucket_counts (the proto comment): the one
definition every layer imports. 15 upper-inclusive buckets: these 14 edges in milliseconds
and an open-ended last one; a gap goes in the first bucket whose edge is >= it."""

from __future__ import annotations

import bisect

LAYOUT = 1
EDGES_MS = (5, 10, 15, 20, 30, 40, 50, 75, 100, 150, 200, 300, 500, 1000)
BUCKETS = len(EDGES_MS) + 1
# A representative gap per bucket, milliseconds: its midpoint, 1.5 x the last edge for the last.
MIDPOINTS_MS = (
    *((low + high) / 2 for low, high in zip((0, *EDGES_MS[:-1]), EDGES_MS, strict=True)),
    1.5 * EDGES_MS[-1],
)


def bucket(gap_ms: float) -> int:
    """Index of the bucket holding a gap of `gap_ms` milliseconds (BUCKETS - 1: overflow)."""
    return bisect.bisect_left(EDGES_MS, gap_ms)

"""ITL layout 1 of ReportFinalTokenRequest.itl_bucket_counts (the proto comment): the one
definition every layer imports. 15 upper-inclusive buckets: these 14 edges in milliseconds
and an open-ended last one."""

from __future__ import annotations

LAYOUT = 1
EDGES_MS = (5, 10, 15, 20, 30, 40, 50, 75, 100, 150, 200, 300, 500, 1000)
BUCKETS = len(EDGES_MS) + 1
# A representative gap per bucket, milliseconds: its midpoint, 1.5 x the last edge for the last.
MIDPOINTS_MS = (
    *((low + high) / 2 for low, high in zip((0, *EDGES_MS[:-1]), EDGES_MS, strict=True)),
    1.5 * EDGES_MS[-1],
)

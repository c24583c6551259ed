"""What a latency or token sample may be before anything learns from it.

Every sample the router learns from comes from a report (`observed_ttft_ms`, the token
counts and the ITL bucket counts are the spec's uint32s; service time is measured on this
replica's clock between two reports of one request, within the request's TTL) or from
another replica's copy of one (the events stream, the per-minute statistics). A number
outside what a report can carry, not finite or negative, is no sample: it comes from a bug
or a foreign writer. Kept, it would stay: an infinite service time or prefill never leaves
an exponentially weighted mean or fit (each later sample folds into infinity), a negative
TTFT makes its worker look faster than free, and both travel to every replica.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_SAMPLE = float(2**32 - 1)  # a uint32: the most milliseconds or tokens a report carries


def is_sample(value: float) -> bool:
    """Whether `value` (milliseconds or tokens) is one a report can carry."""
    return 0.0 <= value <= MAX_SAMPLE  # False for NaN as well


def are_counts(counts: Sequence[int]) -> bool:
    """Whether ITL bucket counts are ones a report can carry (each a uint32)."""
    return all(0 <= count <= MAX_SAMPLE for count in counts)

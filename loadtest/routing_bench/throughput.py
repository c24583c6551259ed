"""Output throughput inside the arrivals window, the same window for every router.

The replay sends requests for `window_s` seconds and then waits for what is under way, so
a run's wall time is the window plus its slowest last request. Completion tokens over that
wall time (`RunStats.out_tok_per_s`) is therefore decided by the tail: with the same
requests and the same tokens, a router whose last request ends 0.3 s later "loses" ~3 %
of throughput at 10 s runs. Here each request's completion tokens are counted only as far
as they were streamed by the window's end, and divided by the window: every router is
measured over the same seconds, requests under way at the end count for the part they got,
and nothing after the window moves the figure. Tokens decoded more slowly (a busier
engine) or a chat turn sent later (its previous turn ended later) still count less.

A request's tokens are placed where its content chunks arrived (`Sample.chunk_s`), its
completion tokens shared evenly over its chunks (an engine may send several tokens in
one chunk). Samples without chunk times (requests files written before them, hand-made
samples) place the first token at the first chunk and the rest evenly up to the end.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from loadtest.routing_bench.replay import Sample


def tokens_by(sample: Sample, window_s: float) -> float:
    """How many of `sample`'s completion tokens were streamed `window_s` after the start."""
    tokens = sample.completion_tokens
    if sample.error or tokens <= 0:
        return 0.0
    if sample.chunk_s:
        arrived = bisect.bisect_right(sample.chunk_s, window_s - sample.arrival_s)
        return tokens * arrived / len(sample.chunk_s)
    first = sample.arrival_s + sample.ttft_s
    last = sample.arrival_s + sample.total_s
    if window_s < first:
        return 0.0
    if window_s >= last or tokens == 1:
        return float(tokens)
    return 1.0 + (tokens - 1) * (window_s - first) / (last - first)


def window_rate(samples: Sequence[Sample], window_s: float) -> float:
    """Completion tokens streamed inside [0, `window_s`] per second of it (0 for no window)."""
    if window_s <= 0:
        return 0.0
    return sum(tokens_by(sample, window_s) for sample in samples) / window_s

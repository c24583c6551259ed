"""Output throughput inside the arrivals window (`routing_bench/throughput.py`) and its check."""

from __future__ import annotations

import dataclasses

import pytest

from loadtest.routing_bench import pooled, ranges, report
from loadtest.routing_bench.replay import Sample, chunk_times
from loadtest.routing_bench.stats import RunStats, summarise
from loadtest.routing_bench.throughput import tokens_by, window_rate

DELTAS = [{"requests": 2.0}, {"requests": 2.0}]


def _sample(arrival: float, ttft: float, total: float, tokens: int, error: str = "") -> Sample:
    return Sample("chat", arrival, ttft, total, 100, 0, tokens, "e", error=error)


def test_tokens_count_as_far_as_they_were_streamed_by_the_window_end() -> None:
    # First token at 1.0 + 0.1 = 1.1 s, the last of 11 at 1.0 + 2.1 = 3.1 s: 0.2 s a token.
    request = _sample(1.0, 0.1, 2.1, 11)
    assert tokens_by(request, 1.0) == 0.0  # sent, nothing streamed yet
    assert tokens_by(request, 1.1) == 1.0  # the first token
    assert tokens_by(request, 2.1) == pytest.approx(6.0)  # 1 + 10 x (1.0 / 2.0)
    assert tokens_by(request, 3.1) == 11.0 == tokens_by(request, 60.0)
    assert tokens_by(_sample(0.0, 0.5, 0.5, 1), 0.5) == 1.0  # one token, at its first
    assert tokens_by(_sample(0.0, 0.0, 0.0, 0, error="StreamError: boom"), 9.0) == 0.0
    assert window_rate([request, _sample(0.0, 0.1, 1.0, 10)], 2.1) == pytest.approx(16 / 2.1)
    assert window_rate([request], 0.0) == 0.0


def test_with_chunk_times_the_tokens_are_counted_where_their_chunks_arrived() -> None:
    # 8 tokens in 4 chunks: two early, then a stall (another prompt's prefill), two late.
    chunks = chunk_times(0.1, [0.1, 1.3, 0.1])
    assert chunks == (0.1, 0.2, 1.5, 1.6)
    request = dataclasses.replace(_sample(1.0, 0.1, 1.6, 8), chunk_s=chunks)
    assert tokens_by(request, 1.05) == 0.0
    assert tokens_by(request, 1.25) == 4.0 == tokens_by(request, 2.4)  # through the stall
    assert tokens_by(_sample(1.0, 0.1, 1.6, 8), 2.4) == pytest.approx(1 + 7 * 1.3 / 1.5)
    assert tokens_by(request, 2.6) == 8.0
    # As a requests file gives them back: a list.
    assert tokens_by(dataclasses.replace(request, chunk_s=list(chunks)), 2.5) == 6.0  # type: ignore[arg-type]


# The same five requests under two routers. Under "late" the last one, sent just before the
# 10 s window's end, ends 0.5 s later (h124's vllm-64 6 req/s: the same requests, the same
# tokens, the last reply later): nothing of it was streamed inside the window under either.
EARLY = [
    _sample(0.5, 0.1, 1.1, 101),
    _sample(3.0, 0.1, 1.1, 101),
    _sample(6.0, 0.1, 1.1, 101),
    _sample(9.0, 0.1, 1.1, 101),  # streams 9.1-10.1 s: 91 of its tokens inside the window
    _sample(9.95, 0.1, 1.1, 101),  # 10.05-11.05 s: none inside
]
LATE = [*EARLY[:4], _sample(9.95, 0.1, 1.6, 101)]  # ends at 11.55 s


def _summary(key: str, samples: list[Sample], seconds: float) -> RunStats:
    stats = summarise(key, 6.0, samples, DELTAS, seconds, window_s=10.0)
    return dataclasses.replace(stats, key=key)


def test_a_later_last_reply_moves_the_old_figure_and_not_the_window_much() -> None:
    early = _summary("least_inflight", EARLY, seconds=11.05)
    late = _summary("kinference", LATE, seconds=11.55)
    assert early.out_tok_per_s == pytest.approx(505 / 11.05)
    assert late.out_tok_per_s == pytest.approx(505 / 11.55)  # 4.3 % lower: the tail alone
    assert early.window_tok_per_s == pytest.approx((303 + 91) / 10.0) == late.window_tok_per_s
    assert early.window_s == 10.0 == late.window_s
    found = {target: (met, text) for target, met, text in report.checks([late, early])}
    met, text = found["output throughput no lower"]
    assert met
    assert text == (
        "39 tok/s in the window vs least_inflight 39 "
        "(to the last reply: 44 tok/s vs least_inflight 46, FAIL)"
    )


def test_tokens_decoded_slower_inside_the_window_still_lose() -> None:
    # Every request decodes half as fast: the one under way at the window's end has
    # streamed fewer tokens by then (a real loss); those that ended inside count the same.
    slow = [_sample(s.arrival_s, s.ttft_s, 2.1, 101) for s in EARLY]
    late = _summary("kinference", slow, seconds=12.05)
    early = _summary("sglang", EARLY, seconds=11.05)
    assert late.window_tok_per_s == pytest.approx((303 + 1 + 100 * 0.9 / 2.0) / 10.0)
    found = {target: met for target, met, _ in report.checks([late, early])}
    assert not found["output throughput no lower"]


def test_a_turn_sent_later_counts_less_inside_the_window() -> None:
    # A chat's turn left 0.5 s later (its previous turn ended later): same tokens in all.
    later = [*EARLY[:3], _sample(9.5, 0.1, 1.1, 101), EARLY[4]]  # 41 tokens inside, not 91
    assert window_rate(later, 10.0) < window_rate(EARLY, 10.0)
    assert sum(s.completion_tokens for s in later) == sum(s.completion_tokens for s in EARLY)


def test_without_a_window_the_whole_run_is_the_window() -> None:
    stats = summarise("r", 6.0, EARLY, DELTAS, seconds=11.05)
    assert stats.window_s == 11.05
    assert stats.window_tok_per_s == pytest.approx(stats.out_tok_per_s)


def test_figures_written_before_the_window_are_checked_on_the_old_figure() -> None:
    early = _summary("least_inflight", EARLY, seconds=11.05)
    late = _summary("kinference", LATE, seconds=11.55)
    before = [dataclasses.replace(s, window_tok_per_s=0.0, window_s=0.0) for s in (late, early)]
    found = {target: (met, text) for target, met, text in report.checks(before)}
    assert found["output throughput no lower"] == (
        False,
        "44 tok/s vs least_inflight 46 (to the last reply; no window figures)",
    )
    assert "| - | 44 |" in report.table(before)  # no window figure: "-", not 0
    assert "| 39 | 44 |" in report.table([late, early])


def test_seeds_pool_the_window_figure_and_ranges_show_both() -> None:
    one = _summary("kinference", EARLY, seconds=11.05)
    two = dataclasses.replace(one, seed=2, window_tok_per_s=40.0, ttfts_ms=(1.0,))
    row = pooled.pool([one, two])
    assert row.window_tok_per_s == pytest.approx((one.window_tok_per_s + 40.0) / 2)
    assert row.window_s == 10.0
    assert pooled.pool([one, dataclasses.replace(two, window_s=0.0)]).window_s == 0.0
    table = ranges.range_table([[one], [two]])
    assert "output tok/s in window | output tok/s to last reply" in table
    assert "| 39\u201340 | 46 |" in table

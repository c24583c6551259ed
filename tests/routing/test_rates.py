"""The learned prefill rates (`routing.rates`): the model's line, each worker's speed."""

from __future__ import annotations

import pytest

from kinference.routing.rates import Rates

MODEL = "m"

# Samples of three identical engines (Dynamo's mockers, ~15 ms + 18.5 us a token), as
# the bench's gateway learned them at 3 req/s (slot, uncached tokens, ms net of the
# sequences beside): slot 0 timed only short prompts and two of ~2.1k, beside others.
SAMPLES = [
    (1, 15, 21.0), (1, 15, 20.0), (0, 183, 38.0), (0, 2109, 59.0), (2, 2203, 57.0),
    (1, 5405, 118.0), (0, 143, 55.0), (0, 213, 38.4), (2, 5320, 124.7), (0, 336, 54.0),
    (1, 131, 25.0), (2, 285, 43.3), (0, 2192, 55.0), (2, 399, 25.0), (1, 255, 26.0),
    (2, 328, 33.1),
]  # fmt: skip


def test_a_worker_of_short_samples_does_not_read_faster_at_a_long_prompt() -> None:
    """Its own line (slope 5 us a token from short prompts) predicted 73 ms for a 5.4k
    document its peers take ~120 for: every cold document went there, busy or not."""
    rates = Rates(alpha=0.1)
    for slot, tokens, ms in SAMPLES:
        rates.observe_prefill(slot, MODEL, tokens, ms)
    long = [rates.prefill_ms(slot, MODEL, 5400) for slot in range(3)]
    assert long[0] >= 0.9 * min(long[1:]), long
    assert max(long) / min(long) < 1.35, long


def test_a_worker_twice_as_slow_reads_twice_as_slow() -> None:
    rates = Rates(alpha=0.2)
    for tokens in (200, 1800, 600, 1400, 1000) * 6:
        rates.observe_prefill(0, MODEL, tokens, 15 + tokens * 0.02)
        rates.observe_prefill(1, MODEL, tokens, 2 * (15 + tokens * 0.02))
    fast, slow = (rates.prefill_ms(slot, MODEL, 5000) for slot in (0, 1))
    assert fast == pytest.approx(15 + 5000 * 0.02, rel=0.35)
    assert slow == pytest.approx(2 * fast, rel=0.02)


def test_a_lone_worker_keeps_its_own_line() -> None:
    rates = Rates(alpha=0.3)
    for tokens in (100, 3000, 800, 2200):
        rates.observe_prefill(4, MODEL, tokens, 12 + tokens * 0.03)
    assert rates.learned(MODEL, "prefill_ms_per_token", 4) == pytest.approx(0.03)
    assert rates.learned(MODEL, "prefill_base_ms", 4) == pytest.approx(12)

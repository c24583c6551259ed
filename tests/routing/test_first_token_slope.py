"""A worker's prefill slope from a late cold first token, until its final reports set it
(`Learning._late_first`, `Rates.observe_first`; h116: on the mixed pool a slow engine kept
its fast peers' price 3-4 s after its first cold token showed it twice as slow)."""

from __future__ import annotations

import math

import pytest

from kinference.routing.decision import LocalChoice

from kinference.routing.rates import Rates
from tests.routing.plugin_helpers import MODEL
from tests.routing.test_learning import choice, learning, served

SLOPE = "prefill_ms_per_token"


def cold(
    slot: int, predicted: float, tokens: float = 1625.0, wait: float = 0.0, cached: float = 0.0
) -> LocalChoice:
    return choice(slot, prompt_tokens=tokens, cached_tokens=cached, predicted_ttft_ms=predicted,
                  predicted_wait_ms=wait, sequences=1.0)  # fmt: skip


def test_a_late_cold_first_token_sets_an_unlearned_workers_slope() -> None:
    """The mixed pool's seed-1 pick: 1625 cold tokens priced at the peers' mean (103 ms)
    on an engine twice as slow, first token at 177 ms: its slope is known at once (on
    main it stayed unknown until the final report, 3 s later)."""
    learn = learning()
    picked = cold(4, 103.0)
    learn.picked(picked)
    learn.first_token(picked, 177.0)
    slope = learn.rates.learned(MODEL, SLOPE, 4)
    assert slope == pytest.approx((177.0 - learn.rates.prior_base_ms) / 1625.0)
    assert learn.rates.provisional(MODEL, 4)


def test_an_early_or_cached_or_short_first_token_teaches_no_slope() -> None:
    learn = learning()
    for slot, picked, ttft in (
        (0, cold(0, 195.0), 86.0),  # early: the borrowed price was safe
        (1, cold(1, 40.0, cached=1504.0), 300.0),  # a hit: not a prefill of all
        (2, cold(2, 20.0, tokens=100.0), 60.0),  # too short to show a per-token cost
        (3, cold(3, 103.0, wait=100.0), 177.0),  # mostly waiting
    ):
        learn.picked(picked)
        learn.first_token(picked, ttft)
        assert math.isnan(learn.rates.learned(MODEL, SLOPE, slot)), slot


def test_final_reports_replace_the_provisional_slope_and_keep_it() -> None:
    learn = learning()
    picked = cold(5, 103.0)
    learn.picked(picked)
    learn.first_token(picked, 300.0)  # provisional: (300 - 15) / 1625
    learn.final(picked, served(prompt_tokens=1625, cached_tokens=0, ttft_ms=177.0))
    fitted = learn.rates.learned(MODEL, SLOPE, 5)
    assert fitted == pytest.approx((177.0 - learn.rates.prior_base_ms) / 1625.0)
    assert not learn.rates.provisional(MODEL, 5)
    again = cold(5, 103.0)
    learn.picked(again)
    learn.first_token(again, 400.0)  # late, but final reports count tokens exactly
    assert learn.rates.learned(MODEL, SLOPE, 5) == fitted


def test_provisional_samples_are_a_weighted_mean_and_a_worker_gone_forgets_them() -> None:
    rates = Rates(alpha=0.5)
    assert rates.observe_first(2, MODEL, 1000.0, 100.0)
    assert rates.observe_first(2, MODEL, 1000.0, 50.0)  # once provisional, any sample
    assert rates.learned(MODEL, SLOPE, 2) == pytest.approx(0.075)
    assert not rates.observe_first(2, MODEL, 100.0, 50.0)  # short
    assert not rates.observe_first(2, MODEL, 1000.0, math.nan)
    rates.forget(2)
    assert math.isnan(rates.learned(MODEL, SLOPE, 2))
    assert not rates.provisional(MODEL, 2)


def test_a_provisional_slope_takes_an_early_sample_too() -> None:
    learn = learning()
    first = cold(6, 103.0)
    learn.picked(first)
    learn.first_token(first, 215.0)  # late: (215 - 15) / 1625 = 0.123
    second = cold(6, 215.0)
    learn.picked(second)
    learn.first_token(second, 177.0)  # early against its new price, yet a sample
    expected = 0.9 * (200.0 / 1625.0) + 0.1 * (162.0 / 1625.0)
    assert learn.rates.learned(MODEL, SLOPE, 6) == pytest.approx(expected)

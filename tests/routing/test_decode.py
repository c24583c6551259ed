"""The decode slow-down learned from the final reports (`routing.decode`) and its term in
the TTFT scorer's cost."""

from __future__ import annotations

import math

import pytest

from kinference.itl_layout import BUCKETS, MIDPOINTS_MS
from kinference.routing.decode import PRIOR_OUTPUT_TOKENS, DecodeSlowdown, mean_gap_ms
from kinference.routing.rates import Rates
from kinference.routing.scorers.ttft import TtftConfig, TtftScorer
from kinference.routing.table import WorkerTable
from tests.routing.plugin_helpers import MODEL, context


def frozen() -> float:
    return 100.0


def engine(beside: float, prompt: float) -> float:
    """A mocker-like engine: 6 ms a step alone, 3 ms more a sequence beside, 0.002 ms more
    a token the request holds."""
    return 6.0 + 3.0 * beside + 0.002 * prompt


def taught(fit: DecodeSlowdown, rounds: int = 4) -> DecodeSlowdown:
    for _ in range(rounds):
        for beside in (0.0, 1.0, 2.0, 3.0):
            for prompt in (300.0, 2000.0, 5000.0):
                assert fit.observe(MODEL, beside, prompt, engine(beside, prompt), 100.0)
    return fit


def test_the_fit_recovers_both_coefficients_and_the_reply_length() -> None:
    fit = taught(DecodeSlowdown(alpha=0.1))
    assert fit.ms_per_sequence(MODEL) == pytest.approx(3.0)
    assert fit.ms_per_token(MODEL) == pytest.approx(0.002)
    assert fit.output_tokens(MODEL) == pytest.approx(100.0)
    per_sequence, per_token = fit.costs(MODEL, 0.0, 0.0)
    assert (per_sequence, per_token) == pytest.approx((150.0, 0.1))  # over half a reply


def test_one_occupancy_fits_no_slope_and_the_priors_stand() -> None:
    fit = DecodeSlowdown()
    for _ in range(10):
        fit.observe(MODEL, 1.0, 2000.0, 20.0, 80.0)
    assert math.isnan(fit.ms_per_sequence(MODEL)) and math.isnan(fit.ms_per_token(MODEL))
    assert fit.costs(MODEL, 2.0, 0.001) == pytest.approx((80.0, 0.04))
    assert DecodeSlowdown().costs("other", 2.0, 0.0) == (PRIOR_OUTPUT_TOKENS, 0.0)


def test_samples_that_say_nothing_are_refused() -> None:
    fit = DecodeSlowdown()
    assert not fit.observe(MODEL, -1.0, 100.0, 10.0, 50.0)
    assert not fit.observe(MODEL, 1.0, 100.0, math.nan, 50.0)
    assert not fit.observe(MODEL, 1.0, 100.0, 10.0, 3.0)  # too few gaps
    assert not fit.observe(MODEL, 1e9, 100.0, 10.0, 50.0)
    assert math.isnan(fit.ms_per_sequence(MODEL))


def test_a_slope_against_the_occupancy_is_never_negative() -> None:
    fit = DecodeSlowdown()
    for beside in (0.0, 1.0, 2.0, 3.0) * 3:
        fit.observe(MODEL, beside, 1000.0, 30.0 - beside, 50.0)
    assert fit.ms_per_sequence(MODEL) == 0.0


def test_the_mean_gap_is_the_buckets_midpoints_weighted() -> None:
    counts = [0] * BUCKETS
    counts[2], counts[4] = 3, 1
    assert mean_gap_ms(counts) == (pytest.approx((3 * MIDPOINTS_MS[2] + MIDPOINTS_MS[4]) / 4), 4)
    assert math.isnan(mean_gap_ms([0] * BUCKETS)[0])


def scorer(rates: Rates, native: bool) -> TtftScorer:
    return TtftScorer(TtftConfig(decode_pressure_ms=0.0), rates, native=native)


@pytest.mark.parametrize("native", [True, False])
def test_a_learned_slow_down_sends_a_new_chat_to_the_worker_running_fewer(native: bool) -> None:
    """Two workers at light load (no batch near full: the pressure term ~0): one runs 2
    sequences and holds 300 of the chat's 2000 tokens, the other runs none. While the decode
    slow-down is not known the cache wins, as on main; once each sequence beside is known
    to slow every step by 3 ms (and each held token by 0.002 ms), the chat goes to the other
    worker, unless the cache saves more than the slower decode costs (1900 tokens held).
    Both small forms (C and Python); `decode_weight` at its default."""
    table = WorkerTable(clock=frozen)
    ctx = context(2, prompt_tokens=2000, cached=[300, 0], table=table)
    table.add_inflight(int(ctx.slots[0]), 2)
    rates = Rates()
    model = scorer(rates, native)
    assert model.score(ctx).tolist()[0] == 1.0
    taught(rates.decode)
    assert model.score(ctx).tolist()[1] == 1.0  # 0.1 x 350 ms a sequence beside, x 2
    held = context(2, prompt_tokens=2000, cached=[1900, 0], table=table)
    held.slots = ctx.slots
    assert model.score(held).tolist()[0] == 1.0  # 1600 tokens' prefill more saved


def test_the_vector_form_prices_it_alike() -> None:
    """Past SMALL_CANDIDATES the numpy form scores: the same choice, the same costs."""
    table = WorkerTable(clock=frozen)
    ctx = context(20, prompt_tokens=2000, cached=[300] + [0] * 19, table=table)
    table.add_inflight(int(ctx.slots[0]), 2)
    rates = Rates()
    model = scorer(rates, False)
    assert model.score(ctx).tolist()[0] == 1.0
    taught(rates.decode)
    vector = model.score(ctx)
    assert vector[0] < 1.0 and vector[1] == 1.0
    small = context(3, prompt_tokens=2000, cached=[300, 0, 0], table=table)
    small.slots = ctx.slots[:3]
    assert model.score(small).tolist() == pytest.approx(vector[:3].tolist())

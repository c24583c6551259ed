"""A worker's prefill slope from its cold first tokens, until its final reports set it
(`Rates.observe_first`, `Learning._first_sample`)."""

from __future__ import annotations

import math

import pytest

from kinference.routing.decision import LocalChoice
from kinference.routing.journal import NullJournal
from kinference.routing.learning import Learning, Served
from kinference.routing.prefix import PrefixIndex
from kinference.routing.rates import MAX_MS_PER_TOKEN, Rates
from kinference.routing.table import WorkerTable
from tests.routing.plugin_helpers import MODEL

SLOPE = "prefill_ms_per_token"


def learning() -> Learning:
    return Learning(WorkerTable(), PrefixIndex(10_000), NullJournal())


def cold(slot: int, tokens: float = 2000.0, **fields: object) -> LocalChoice:
    """A pick predicted cold on its worker, of a complete prompt of `tokens` (4 characters
    a token, the prior's ratio), predicted at 100 ms without wait."""
    values: dict[str, object] = {
        "prompt_tokens": tokens, "text_chars": int(tokens * 4), "predicted_ttft_ms": 100.0,
        "predicted_wait_ms": 0.0, "sequences": 1.0,
    }  # fmt: skip
    values.update(fields)
    return LocalChoice(f"10.0.0.{slot}:8000", slot, "default/pool", MODEL, **values)  # type: ignore[arg-type]


def test_a_first_token_sets_the_slope_until_final_reports_do() -> None:
    rates = Rates()
    assert rates.observe_first(2, MODEL, 2000.0, 200.0, 4.0)
    assert rates.learned(MODEL, SLOPE, 2) == pytest.approx(0.1)
    assert rates.provisional(MODEL, 2)
    assert math.isnan(rates.learned(MODEL, "prefill_base_ms", 2))  # the fixed cost: prior
    assert rates.observe_first(2, MODEL, 1000.0, 50.0, 4.0)  # 0.05: weighted as the fit's
    assert rates.learned(MODEL, SLOPE, 2) == pytest.approx(0.9 * 0.1 + 0.1 * 0.05)
    rates.observe_prefill(2, MODEL, 2000.0, 115.0)  # a final report of a long prompt
    assert not rates.provisional(MODEL, 2)
    assert rates.learned(MODEL, SLOPE, 2) == pytest.approx(0.05)  # (115 - 15) / 2000
    assert not rates.observe_first(2, MODEL, 2000.0, 400.0, 4.0)  # finals count exactly
    assert rates.learned(MODEL, SLOPE, 2) == pytest.approx(0.05)


def test_a_short_final_report_keeps_the_provisional_slope() -> None:
    """A final report of a short prompt (a readiness probe's) sets only the fixed cost,
    at the provisional slope."""
    rates = Rates()
    rates.observe_first(0, MODEL, 2000.0, 200.0, 4.0)
    rates.observe_prefill(0, MODEL, 10.0, 20.0)
    assert rates.provisional(MODEL, 0)
    assert rates.learned(MODEL, SLOPE, 0) == pytest.approx(0.1)
    assert rates.learned(MODEL, "prefill_base_ms", 0) == pytest.approx(19.0)


def test_short_or_meaningless_first_tokens_teach_nothing() -> None:
    rates = Rates()
    assert not rates.observe_first(0, MODEL, 100.0, 50.0, 4.0)  # under 256 tokens
    assert not rates.observe_first(0, MODEL, 2000.0, math.nan, 4.0)
    assert not rates.observe_first(0, MODEL, 2000.0, 100.0, 0.0)
    assert rates.peek(MODEL, SLOPE) is None or math.isnan(rates.learned(MODEL, SLOPE, 0))
    assert rates.observe_first(0, MODEL, 2000.0, 1e9, 4.0)  # bounded as the fit is
    assert rates.learned(MODEL, SLOPE, 0) == MAX_MS_PER_TOKEN
    assert rates.observe_first(1, MODEL, 2000.0, -50.0, 4.0)  # faster than the fixed cost
    assert rates.learned(MODEL, SLOPE, 1) == 0.0


def test_a_new_characters_per_token_ratio_counts_provisional_slopes_again() -> None:
    """Counted at 4 characters a token where the tokenizer makes 2, a prompt had half its
    tokens and the slope came out twice too high; at the learned ratio it is right."""
    rates = Rates()
    rates.observe_first(3, MODEL, 1000.0, 100.0, 4.0)  # 4000 characters: really 2000 tokens
    assert rates.learned(MODEL, SLOPE, 3) == pytest.approx(0.1)
    rates.recount(MODEL, 2.0)
    assert rates.learned(MODEL, SLOPE, 3) == pytest.approx(0.05)
    rates.recount("other", 1.0)
    assert rates.learned(MODEL, SLOPE, 3) == pytest.approx(0.05)


def test_a_worker_that_left_forgets_its_provisional_slope() -> None:
    rates = Rates()
    rates.observe_first(1, MODEL, 2000.0, 200.0, 4.0)
    rates.forget(1)
    assert not rates.provisional(MODEL, 1)
    assert math.isnan(rates.learned(MODEL, SLOPE, 1))
    rates.recount(MODEL, 2.0)  # nothing provisional left to count again
    assert math.isnan(rates.learned(MODEL, SLOPE, 1))


def test_a_cold_first_token_teaches_its_worker_before_any_final_report() -> None:
    learn = learning()
    learn.first_token(cold(1), 215.0)  # 15 ms fixed (the prior) + 2000 tokens at 0.1
    assert learn.rates.learned(MODEL, SLOPE, 1) == pytest.approx(0.1)
    learn.first_token(cold(2, predicted_wait_ms=40.0), 155.0)  # net of the predicted wait
    assert learn.rates.learned(MODEL, SLOPE, 2) == pytest.approx(0.05)


def test_a_cold_first_token_is_net_of_the_busy_cost_beside_it() -> None:
    learn = learning()
    learn.rates.prior_busy_ms = 10.0
    learn.first_token(cold(1, sequences=3.0), 235.0)  # 2 running beside it: 20 ms
    assert learn.rates.learned(MODEL, SLOPE, 1) == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("fields", "ttft_ms"),
    [
        ({"cached_tokens": 500.0}, 215.0),  # predicted partly cached: not all prefilled
        ({"text_chars": 0}, 215.0),  # no complete text: could not be counted again
        ({"predicted_wait_ms": 150.0}, 215.0),  # mostly a wait
        ({"predicted_ttft_ms": None}, 215.0),  # no prediction: nothing to judge a queue
        ({"sequences": 3.0}, 900.0),  # found queued behind the sequences it joined
    ],
)
def test_which_first_tokens_are_no_sample(fields: dict[str, object], ttft_ms: float) -> None:
    learn = learning()
    learn.first_token(cold(1, 2000.0, **fields), ttft_ms)
    assert learn.rates.peek(MODEL, SLOPE) is None or math.isnan(
        learn.rates.learned(MODEL, SLOPE, 1)
    )


def test_the_final_report_of_a_long_prompt_takes_over() -> None:
    learn = learning()
    picked = cold(1)
    learn.first_token(picked, 215.0)
    learn.final(picked, Served(2000, 0, (), 115.0, 1000.0))  # the report says 0.05
    assert not learn.rates.provisional(MODEL, 1)
    assert learn.rates.learned(MODEL, SLOPE, 1) == pytest.approx(0.05)


def test_a_learned_ratio_recounts_the_provisional_slopes() -> None:
    learn = learning()
    learn.first_token(cold(1), 215.0)
    for _ in range(3):  # the model's tokenizer makes 2 characters a token
        learn.final(cold(0, tokens=100.0, text_chars=2000), Served(1000, None, (), None, None))
    assert learn.text.chars_per_token(MODEL) == pytest.approx(2.0)
    assert learn.rates.learned(MODEL, SLOPE, 1) == pytest.approx(0.05)


def test_service_time_is_the_weighted_mean_of_the_samples_seen() -> None:
    """A probe's 15 ms first, then replies of 1.5 s: the mean is the samples' (weighted),
    not the probe's moved a tenth of the way per report."""
    rates = Rates(alpha=0.1)
    rates.observe_service(0, MODEL, 15.0)
    assert rates.learned(MODEL, "service_ms", 0) == 15.0
    rates.observe_service(0, MODEL, 1500.0)
    # weights 0.09 (the probe's, decayed) and 0.1: (0.09 * 15 + 0.1 * 1500) / 0.19
    assert rates.learned(MODEL, "service_ms", 0) == pytest.approx(796.6, abs=0.1)
    for _ in range(4):
        rates.observe_service(0, MODEL, 1500.0)
    assert rates.learned(MODEL, "service_ms", 0) > 1200.0  # before: 15 + 0.41 * 1485 = 624
    for _ in range(200):  # long run: the exponentially weighted mean, the probe forgotten
        rates.observe_service(0, MODEL, 1000.0)
    assert rates.learned(MODEL, "service_ms", 0) == pytest.approx(1000.0)
    rates.forget(0)
    rates.observe_service(0, MODEL, 700.0)  # a new worker in the slot starts afresh
    assert rates.learned(MODEL, "service_ms", 0) == 700.0

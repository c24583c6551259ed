"""Provisional prefill rates from cold first tokens (`routing.first_prefill`), until a
worker's final reports set its slope."""

from __future__ import annotations

import math

from kinference.routing.decision import LocalChoice
from kinference.routing.journal import NullJournal
from kinference.routing.learning import Learning, Served
from kinference.routing.prefix import PrefixIndex
from kinference.routing.table import WorkerTable
from tests.routing.plugin_helpers import MODEL

PRIOR = 0.1  # ms a token: the shipped prior, 10k tokens/s


def learning() -> Learning:
    return Learning(WorkerTable(), PrefixIndex(10_000), NullJournal())


def cold(slot: int, tokens: float, **fields: object) -> LocalChoice:
    """A pick predicted cold on its worker, alone there, no wait predicted."""
    values: dict[str, object] = {
        "prompt_tokens": tokens, "predicted_ttft_ms": 15.0 + tokens * PRIOR,
        "predicted_wait_ms": 0.0, "sequences": 1.0,
    }  # fmt: skip
    values.update(fields)
    return LocalChoice(f"10.0.0.{slot}:8000", slot, "default/pool", MODEL, **values)  # type: ignore[arg-type]


def first(learn: Learning, picked: LocalChoice, ttft_ms: float) -> None:
    learn.picked(picked)
    learn.first_token(picked, ttft_ms)


def slope(learn: Learning, slot: int) -> float:
    return learn.rates.learned(MODEL, "prefill_ms_per_token", slot)


def final(learn: Learning, picked: LocalChoice, tokens: int, ttft_ms: float) -> None:
    learn.final(picked, Served(tokens, 0, (), ttft_ms, 1000.0))


def test_a_cold_first_token_sets_a_provisional_rate() -> None:
    learn = learning()
    first(learn, cold(0, 1600.0), 95.0)  # 15 ms fixed (the prior's) + 80 over 1600 tokens
    assert math.isclose(slope(learn, 0), 0.05)
    assert math.isnan(slope(learn, 1))


def test_a_single_short_prompt_sets_no_slope() -> None:
    learn = learning()
    first(learn, cold(0, 100.0), 40.0)  # 25 ms over 100 tokens would be 2.5x the prior
    assert math.isnan(slope(learn, 0))
    assert math.isnan(learn.rates.learned(MODEL, "prefill_base_ms", 0))


def test_a_prompt_predicted_cached_or_a_queue_teaches_nothing() -> None:
    learn = learning()
    first(learn, cold(0, 1600.0, cached_tokens=800.0), 60.0)
    first(learn, cold(1, 1600.0, predicted_wait_ms=200.0), 300.0)  # waited most of it
    queued = cold(2, 1600.0, sequences=5.0)
    first(learn, queued, 175.0 + 175.0 + 250.0 + 10.0)  # late past the queued test
    assert all(math.isnan(slope(learn, slot)) for slot in (0, 1, 2))


def test_the_wait_and_busy_cost_are_not_prefill() -> None:
    learn = learning()
    learn.rates.observe_busy(MODEL, 2.0, 20.0)  # learned: 10 ms a sequence beside
    first(learn, cold(0, 1600.0, predicted_wait_ms=20.0, sequences=3.0), 135.0)
    assert math.isclose(slope(learn, 0), 0.05)  # 135 - 20 waited - 2 x 10 beside


def test_a_provisional_rate_is_never_slower_than_the_prior() -> None:
    learn = learning()
    first(learn, cold(0, 1600.0), 240.0)  # late, yet not caught as a queue
    assert slope(learn, 0) == PRIOR


def test_a_probes_short_report_gives_the_fixed_cost_and_keeps_it_provisional() -> None:
    learn = learning()
    probe = cold(0, 9.0)
    first(learn, probe, 20.0)
    final(learn, probe, 9, 20.0)  # a readiness probe: its final report sets no slope
    first(learn, cold(0, 1609.0), 100.0)
    assert math.isclose(slope(learn, 0), 0.05, rel_tol=0.01)
    assert math.isclose(learn.rates.learned(MODEL, "prefill_base_ms", 0), 19.5, abs_tol=0.5)


def test_final_reports_that_set_the_slope_replace_it() -> None:
    learn = learning()
    first(learn, cold(0, 1600.0), 95.0)
    served = cold(0, 2000.0)
    first(learn, served, 115.0)
    final(learn, served, 2000, 215.0)  # the engine's own count: slower than first thought
    assert math.isclose(slope(learn, 0), 0.1)
    first(learn, cold(0, 3000.0), 160.0)  # later cold first tokens change nothing now
    assert math.isclose(slope(learn, 0), 0.1)


def test_a_learned_ratio_counts_the_samples_again() -> None:
    learn = learning()
    first(learn, cold(0, 1009.0, text_chars=4000, fixed_tokens=9), 115.0)  # at 4 a token
    assert math.isclose(slope(learn, 0), 0.1, rel_tol=0.01)
    for _ in range(3):  # three reports: the model makes 2 characters a token
        learn.observe_text(MODEL, 4000.0, 2000.0)
    assert math.isclose(slope(learn, 0), 100.0 / 2009.0, rel_tol=0.01)


def test_a_worker_that_left_forgets_its_provisional_rate() -> None:
    learn = learning()
    first(learn, cold(0, 1600.0), 95.0)
    learn.forget(0)
    assert math.isnan(slope(learn, 0))
    first(learn, cold(0, 100.0), 30.0)  # the old samples do not come back with a new one
    assert math.isnan(slope(learn, 0))

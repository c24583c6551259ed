"""The share of the unknown batch's doubt that comes true (`routing.doubt`): learned per
model from the first tokens of picks priced with it, bounded, prior 1; applied by the
TTFT scorer and exported per model of the policy."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest
from prometheus_client.core import GaugeMetricFamily

from kinference.config import parse_policy
from kinference.ops.routing_collector import RoutingCollector
from kinference.routing import PrefixIndex, ProviderHealth, Router, TenantGate, WorkerTable
from kinference.routing.decision import LocalChoice
from kinference.routing.doubt import (
    DOUBT_LEARNING_RATE,
    MAX_DOUBT_MODELS,
    MAX_DOUBT_SHARE,
    DoubtShares,
)
from kinference.routing.journal import NullJournal
from kinference.routing.learning import Learning
from kinference.routing.policy import cooldowns_of
from kinference.routing.rates import Rates
from kinference.routing.scorers import ttft as ttft_module
from tests.routing.plugin_helpers import MODEL, context
from tests.routing.test_ttft import _seen_running, frozen, scorer


def test_the_prior_is_the_doubt_as_priced() -> None:
    shares = DoubtShares()
    assert shares.share(MODEL) == 1.0
    assert math.isnan(shares.learned(MODEL))


def test_tests_that_never_queue_shed_the_doubt() -> None:
    """An engine whose batch is far above what the load runs (vLLM's 64-256): every pick
    past the seen frontier gets its first token on time."""
    shares = DoubtShares(alpha=0.1)
    for _ in range(40):
        assert shares.observe(MODEL, 70.0, 0.0)
    assert shares.share(MODEL) < 0.05


def test_tests_that_queue_as_priced_keep_it_and_longer_queues_raise_it() -> None:
    shares = DoubtShares(alpha=0.1)
    for _ in range(40):
        shares.observe(MODEL, 70.0, 70.0)
    assert shares.share(MODEL) == pytest.approx(1.0)
    for _ in range(40):
        shares.observe("four-slots", 50.0, 500.0)  # a queue behind a 4-slot batch
    assert 1.0 < shares.share("four-slots") <= MAX_DOUBT_SHARE


def test_a_queue_after_on_time_tests_brings_the_doubt_back() -> None:
    shares = DoubtShares(alpha=0.1)
    for _ in range(10):
        shares.observe(MODEL, 70.0, 0.0)
    low = shares.share(MODEL)
    shares.observe(MODEL, 50.0, 500.0)
    assert shares.share(MODEL) == pytest.approx(0.9 * low + 0.1 * MAX_DOUBT_SHARE)


@pytest.mark.parametrize(
    ("priced", "realized"),
    [(math.nan, 0.0), (math.inf, 0.0), (-5.0, 0.0), (0.0, 100.0), (0.5, 100.0),
     (70.0, math.nan), (70.0, math.inf), (70.0, -math.inf)],
)  # fmt: skip
def test_a_hostile_or_empty_test_teaches_nothing(priced: float, realized: float) -> None:
    shares = DoubtShares()
    assert not shares.observe(MODEL, priced, realized)
    assert math.isnan(shares.learned(MODEL))


@pytest.mark.parametrize("realized", [1e300, -1e300, 1e9, -70.0])
def test_one_test_moves_the_share_by_at_most_its_bound(realized: float) -> None:
    shares = DoubtShares(alpha=0.1)
    assert shares.observe(MODEL, 70.0, realized)
    assert 0.9 <= shares.share(MODEL) <= 0.9 + 0.1 * MAX_DOUBT_SHARE


def test_the_models_with_a_share_are_bounded() -> None:
    shares = DoubtShares(alpha=0.1)
    for i in range(MAX_DOUBT_MODELS + 10):
        shares.observe(f"m{i}", 70.0, 0.0)
    assert math.isnan(shares.learned("m0"))  # the first learned left
    assert shares.learned(f"m{MAX_DOUBT_MODELS + 9}") == pytest.approx(0.9)


def test_interleaved_tests_of_two_models_do_not_mix() -> None:
    """Reports of two models' engines arrive interleaved (as from concurrent requests):
    each model's share is what its own tests alone make it."""
    mixed, alone = DoubtShares(), DoubtShares()
    rng = random.Random(5)
    for _ in range(200):
        if rng.random() < 0.5:
            mixed.observe("a", 60.0, 0.0)
            alone.observe("a", 60.0, 0.0)
        else:
            mixed.observe("b", 60.0, 300.0)
    assert mixed.share("a") == alone.share("a")
    assert mixed.share("b") > 1.0


def choice(**fields: object) -> LocalChoice:
    return LocalChoice("10.0.0.1:8000", 1, "default/pool", MODEL, **fields)  # type: ignore[arg-type]


def learning() -> Learning:
    table = WorkerTable()
    table.slot("10.0.0.1:8000")
    return Learning(table, PrefixIndex(1000), NullJournal())


def test_a_first_token_on_time_past_the_frontier_teaches_that_none_came_true() -> None:
    learn = learning()
    tested = choice(predicted_ttft_ms=20.0, predicted_doubt_ms=70.0, sequences=5.0)
    learn.first_token(tested, 22.0)
    assert learn.rates.doubt.share(MODEL) == pytest.approx(1.0 - DOUBT_LEARNING_RATE)


def test_a_queued_first_token_teaches_how_much_came_true() -> None:
    learn = learning()
    tested = choice(predicted_ttft_ms=20.0, predicted_doubt_ms=100.0, sequences=5.0)
    learn.first_token(tested, 20.0 + 600.0)  # waited 600 ms for a slot
    rate = DOUBT_LEARNING_RATE
    assert learn.rates.doubt.share(MODEL) == pytest.approx(1.0 - rate + rate * MAX_DOUBT_SHARE)


@pytest.mark.parametrize(
    ("fields", "ttft_ms"),
    [
        ({"predicted_ttft_ms": 20.0, "sequences": 5.0}, 22.0),  # no doubt priced
        ({"predicted_ttft_ms": None, "predicted_doubt_ms": 70.0, "sequences": 5.0}, 22.0),
        # late, but by less than its own time again and the queue slack: not clearly either
        ({"predicted_ttft_ms": 20.0, "predicted_doubt_ms": 70.0, "sequences": 5.0}, 200.0),
    ],
)
def test_a_pick_that_tested_nothing_teaches_nothing(
    fields: dict[str, object], ttft_ms: float
) -> None:
    learn = learning()
    learn.first_token(choice(**fields), ttft_ms)
    assert math.isnan(learn.rates.doubt.learned(MODEL))


POLICY = """
pools:
  - {name: a, endpoints: ["10.0.0.1:8000"], models: [m]}
"""


def samples(families: Sequence[GaugeMetricFamily], name: str) -> dict[tuple[str, ...], float]:
    (family,) = [f for f in families if f.name == name]
    return {tuple(s.labels.values()): s.value for s in family.samples}


def test_the_share_is_exported_per_model_of_the_policy() -> None:
    policy = parse_policy(POLICY)
    router = Router(
        policy, table=WorkerTable(), prefix=PrefixIndex(1000),
        health=ProviderHealth(cooldowns_of(policy)), tenants=TenantGate(),
        rng=random.Random(0),
    )  # fmt: skip
    families = list(RoutingCollector(router).collect())
    rates = samples(families, "kinference_model_learned_rate")  # type: ignore[arg-type]
    assert math.isnan(rates["m", "doubt_share"])  # the prior in use
    router.learning.rates.doubt.observe("m", 70.0, 0.0)
    rates = samples(list(RoutingCollector(router).collect()), "kinference_model_learned_rate")  # type: ignore[arg-type]
    assert rates["m", "doubt_share"] == pytest.approx(1.0 - DOUBT_LEARNING_RATE)


def test_a_shed_doubt_keeps_a_hit_past_the_frontier_on_its_cache() -> None:
    """vllm-64 at 18 req/s: a shared prompt's first turn, cached on an engine running 4
    (3 the most its pool was seen running), went cold to an idle engine for ~70 ms of
    doubt (88 ms instead of a ~16 ms hit). Once the pool's tests past the frontier came
    back on time, the hit stays; the doubt as priced is written on the context."""
    table = WorkerTable(clock=frozen)
    slots = table.slots(f"10.0.0.{i}:8000" for i in range(2)).tolist()
    _seen_running(table, slots[0], 3)
    _seen_running(table, slots[1], 0)
    table.add_inflight(slots[0], 1)  # picked since the reading: 4 on it
    ctx = context(2, prompt_tokens=1600, cached=[1500, 0], table=table)
    rates = Rates()
    for candidates in (ttft_module.SMALL_CANDIDATES, 0):  # both forms
        ttft_module.SMALL_CANDIDATES, kept = candidates, ttft_module.SMALL_CANDIDATES
        try:
            assert scorer(rates).score(ctx).argmax() == 1  # the prior: priced in full
            assert ctx.unsure_ms is not None and ctx.unsure_ms[0] > 0.0
            assert ctx.unsure_ms[1] == 0.0
        finally:
            ttft_module.SMALL_CANDIDATES = kept
    for _ in range(30):
        rates.doubt.observe(MODEL, 70.0, 0.0)
    for candidates in (ttft_module.SMALL_CANDIDATES, 0):
        ttft_module.SMALL_CANDIDATES, kept = candidates, ttft_module.SMALL_CANDIDATES
        try:
            assert scorer(rates).score(ctx).argmax() == 0
        finally:
            ttft_module.SMALL_CANDIDATES = kept

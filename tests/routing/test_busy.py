"""The busy cost (what each sequence running beside a request adds to its TTFT): learned
per model from this replica's reports, journalled as samples, and merged from the other
replicas' samples into the same fit; exported per model of the policy."""

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
from kinference.routing.journal import NullJournal
from kinference.routing.learning import Learning, Served
from kinference.routing.policy import cooldowns_of
from kinference.routing.rates import (
    MAX_BUSY_MODELS,
    MAX_BUSY_MS,
    MAX_BUSY_SEQUENCES,
    Rates,
    busy_sample,
)
from kinference.routing.scorers.ttft_config import TtftConfig
from tests.routing.plugin_helpers import MODEL

LENGTHS = (200, 1800, 600, 1400, 1000)


class Samples(NullJournal):
    """A journal keeping the busy samples this replica would publish."""

    def __init__(self) -> None:
        self.busy_samples: list[tuple[str, str, float, float]] = []

    def busy(self, endpoint: str, model: str, sequences: float, excess_ms: float) -> None:
        self.busy_samples.append((endpoint, model, sequences, excess_ms))


def choice(slot: int, **fields: object) -> LocalChoice:
    return LocalChoice(f"10.0.0.{slot}:8000", slot, "default/pool", MODEL, **fields)  # type: ignore[arg-type]


def served(tokens: int, ttft_ms: float) -> Served:
    return Served(tokens, 0, (), ttft_ms, None)


def teach(learn: Learning, rounds: int) -> None:
    """Alone: 20 ms + 0.05 ms a token; beside 4 running: 40 ms later (10 ms a sequence)."""
    for tokens in LENGTHS * 4:
        learn.final(choice(1, prompt_tokens=float(tokens), sequences=1.0),
                    served(tokens, 20.0 + 0.05 * tokens))  # fmt: skip
    for tokens in LENGTHS * rounds:
        learn.final(choice(1, prompt_tokens=1000.0, sequences=5.0), served(1000, 110.0))
        learn.final(choice(1, prompt_tokens=float(tokens), sequences=1.0),
                    served(tokens, 20.0 + 0.05 * tokens))  # fmt: skip


def test_each_busy_sample_learned_is_journalled_for_the_other_replicas() -> None:
    journal = Samples()
    learn = Learning(WorkerTable(), PrefixIndex(10_000), journal)
    teach(learn, rounds=6)
    assert learn.rates.busy_ms(MODEL) == pytest.approx(10.0, rel=0.05)
    assert len(journal.busy_samples) == 6 * len(LENGTHS)  # one per request beside others
    assert {(e, m, s) for e, m, s, _ in journal.busy_samples} == {("10.0.0.1:8000", MODEL, 4.0)}
    assert all(excess == pytest.approx(40.0, abs=10.0) for *_, excess in journal.busy_samples)


def test_another_replicas_samples_give_the_same_rate_as_its_own() -> None:
    """Folded in the order they were learned, the samples make the same fit: every replica
    predicts the same busy cost, whichever of them served the requests."""
    journal = Samples()
    first = Learning(WorkerTable(), PrefixIndex(10_000), journal)
    teach(first, rounds=6)
    second = Rates()
    assert math.isnan(second.learned_busy(MODEL))  # the prior until a sample
    for _endpoint, model, sequences, excess in journal.busy_samples:
        assert second.observe_busy(model, sequences, excess)
    assert second.learned_busy(MODEL) == first.rates.learned_busy(MODEL)


def test_a_lone_request_or_a_queue_it_did_not_see_is_no_busy_sample() -> None:
    journal = Samples()
    learn = Learning(WorkerTable(), PrefixIndex(10_000), journal)
    teach(learn, rounds=0)
    queued = choice(1, prompt_tokens=1000.0, sequences=5.0, predicted_wait_ms=900.0)
    learn.final(queued, served(1000, 1000.0))  # waited: neither prefill nor busy sample
    unlearned = choice(2, prompt_tokens=1000.0, sequences=5.0)
    learn.final(unlearned, served(1000, 110.0))  # no prefill learned on that worker yet
    assert journal.busy_samples == []
    assert math.isnan(learn.rates.learned_busy(MODEL))


@pytest.mark.parametrize(
    ("sequences", "excess"),
    [
        (0.5, 10.0),  # nothing ran beside it
        (math.nan, 10.0),
        (2.0, math.nan),
        (2.0, math.inf),
        (2.0, -math.inf),
        (math.inf, 10.0),
        (MAX_BUSY_SEQUENCES * 2, 10.0),  # more than any engine runs: a corrupt entry
    ],
)
def test_a_hostile_sample_teaches_nothing(sequences: float, excess: float) -> None:
    rates = Rates(TtftConfig(prior_busy_ms_per_sequence=3.0))
    assert not rates.observe_busy(MODEL, sequences, excess)
    assert busy_sample(sequences, excess) is None
    assert rates.busy_ms(MODEL) == 3.0 and math.isnan(rates.learned_busy(MODEL))


def test_one_sample_moves_the_fit_by_at_most_the_bound_either_way() -> None:
    assert busy_sample(2.0, 1e9) == (2.0, 2 * MAX_BUSY_MS)
    assert busy_sample(2.0, -1e9) == (2.0, -2 * MAX_BUSY_MS)
    rates = Rates(TtftConfig(learning_rate=0.1))
    for _ in range(20):
        rates.observe_busy(MODEL, 4.0, 40.0)
    rates.observe_busy(MODEL, 4.0, -1e300)  # a misread prefill does not wipe the fit
    assert 0.0 < rates.busy_ms(MODEL) < 10.0  # one sample of -200 ms, not of -1e300


def test_the_models_with_a_busy_fit_are_bounded() -> None:
    rates = Rates()
    for n in range(MAX_BUSY_MODELS + 10):
        rates.observe_busy(f"model-{n}", 2.0, 20.0)
    assert math.isnan(rates.learned_busy("model-0"))  # the first learned were forgotten
    assert rates.learned_busy(f"model-{MAX_BUSY_MODELS + 9}") == 10.0


POLICY = """
pools:
  - namespace: default
    name: chat
    endpoints: ["10.0.0.1:8000", "10.0.0.2:8000"]
    models: ["m", "n"]
"""


def router() -> Router:
    policy = parse_policy(POLICY)
    return Router(
        policy, table=WorkerTable(), prefix=PrefixIndex(1000),
        health=ProviderHealth(cooldowns_of(policy)), tenants=TenantGate(),
        rng=random.Random(0),
    )  # fmt: skip


def samples(families: Sequence[GaugeMetricFamily], name: str) -> dict[tuple[str, ...], float]:
    (family,) = [f for f in families if f.name == name]
    return {tuple(s.labels.values()): s.value for s in family.samples}


def test_the_busy_rate_is_exported_per_model_of_the_policy_only() -> None:
    r = router()
    r.remote_busy("10.0.0.1:8000", "m", 2.0, 30.0)  # learned from another replica
    r.remote_busy("10.0.0.9:8000", "a-callers-name", 2.0, 30.0)  # not a policy model
    families = list(RoutingCollector(r).collect())
    busy = samples(families, "kinference_model_learned_rate")  # type: ignore[arg-type]
    assert set(busy) == {("m", "busy_ms_per_sequence"), ("n", "busy_ms_per_sequence")}
    assert busy["m", "busy_ms_per_sequence"] == 15.0
    assert math.isnan(busy["n", "busy_ms_per_sequence"])  # the prior in use

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
from kinference.routing.busy import MAX_BUSY_MS, MAX_BUSY_SEQUENCES, busy_sample
from kinference.routing.decision import LocalChoice
from kinference.routing.journal import NullJournal
from kinference.routing.learning import Learning, Served
from kinference.routing.policy import cooldowns_of
from kinference.routing.rates import MAX_BUSY_MODELS, Rates
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
    # One per request with a prefill learned on its worker (the first had none), alone too.
    assert len(journal.busy_samples) == (4 + 2 * 6) * len(LENGTHS) - 1
    assert {(e, m) for e, m, _, _ in journal.busy_samples} == {("10.0.0.1:8000", MODEL)}
    beside = [excess for _, _, sequences, excess in journal.busy_samples if sequences == 4.0]
    assert len(beside) == 6 * len(LENGTHS)
    assert all(excess == pytest.approx(40.0, abs=10.0) for excess in beside)


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


def test_a_lone_request_is_a_sample_of_the_offset_and_teaches_no_slope() -> None:
    journal = Samples()
    learn = Learning(WorkerTable(), PrefixIndex(10_000), journal)
    teach(learn, rounds=0)  # alone on its worker every time
    assert {sequences for _, _, sequences, _ in journal.busy_samples} == {0.0}
    assert math.isnan(learn.rates.learned_busy(MODEL))  # the sequences never differed


def test_a_queue_it_did_not_see_or_an_unlearned_worker_is_no_busy_sample() -> None:
    journal = Samples()
    learn = Learning(WorkerTable(), PrefixIndex(10_000), journal)
    teach(learn, rounds=0)
    journal.busy_samples.clear()
    queued = choice(1, prompt_tokens=1000.0, sequences=5.0, predicted_wait_ms=900.0)
    learn.final(queued, served(1000, 1000.0))  # waited: neither prefill nor busy sample
    unlearned = choice(2, prompt_tokens=1000.0, sequences=5.0)
    learn.final(unlearned, served(1000, 110.0))  # no prefill learned on that worker yet
    assert journal.busy_samples == []
    assert math.isnan(learn.rates.learned_busy(MODEL))


@pytest.mark.parametrize(
    ("sequences", "excess"),
    [
        (-1.0, 10.0),  # fewer than none beside it
        (math.nan, 10.0),
        (2.0, math.nan),
        (2.0, math.inf),
        (2.0, -math.inf),
        (math.inf, 10.0),
        (MAX_BUSY_SEQUENCES * 2, 10.0),  # more than any engine runs: a corrupt entry
    ],
)
def test_a_hostile_sample_teaches_nothing(sequences: float, excess: float) -> None:
    rates = Rates(prior_busy_ms=3.0)
    assert not rates.observe_busy(MODEL, sequences, excess)
    assert busy_sample(sequences, excess) is None
    assert rates.busy_ms(MODEL) == 3.0 and math.isnan(rates.learned_busy(MODEL))


def test_one_sample_moves_the_fit_by_at_most_the_bound_either_way() -> None:
    assert busy_sample(2.0, 1e9) == (2.0, 2 * MAX_BUSY_MS)
    assert busy_sample(2.0, -1e9) == (2.0, -2 * MAX_BUSY_MS)
    assert busy_sample(0.0, 1e9) == (0.0, MAX_BUSY_MS)  # alone: one sequence's bound
    rates = Rates(alpha=0.1)
    for _ in range(20):
        rates.observe_busy(MODEL, 0.0, 0.0)
        rates.observe_busy(MODEL, 4.0, 40.0)
    rates.observe_busy(MODEL, 4.0, -1e300)  # a misread prefill does not wipe the fit
    assert math.isfinite(rates.busy_ms(MODEL))  # one sample of -200 ms, not of -1e300
    for _ in range(20):
        rates.observe_busy(MODEL, 0.0, 0.0)
        rates.observe_busy(MODEL, 4.0, 40.0)
    assert rates.busy_ms(MODEL) == pytest.approx(10.0, rel=0.1)


def test_the_models_with_a_busy_fit_are_bounded() -> None:
    rates = Rates()
    for n in range(MAX_BUSY_MODELS + 10):
        rates.observe_busy(f"model-{n}", 0.0, 0.0)
        rates.observe_busy(f"model-{n}", 2.0, 20.0)
    assert math.isnan(rates.learned_busy("model-0"))  # the first learned were forgotten
    assert rates.learned_busy(f"model-{MAX_BUSY_MODELS + 9}") == pytest.approx(10.0)


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
    r.remote_busy("10.0.0.1:8000", "m", 0.0, 0.0)  # learned from another replica
    r.remote_busy("10.0.0.1:8000", "m", 2.0, 30.0)
    r.remote_busy("10.0.0.9:8000", "a-callers-name", 2.0, 30.0)  # not a policy model
    families = list(RoutingCollector(r).collect())
    busy = samples(families, "kinference_model_learned_rate")  # type: ignore[arg-type]
    assert set(busy) == {("m", "busy_ms_per_sequence"), ("n", "busy_ms_per_sequence")}
    assert busy["m", "busy_ms_per_sequence"] == pytest.approx(15.0)
    assert math.isnan(busy["n", "busy_ms_per_sequence"])  # the prior in use


def test_the_prefill_fits_error_is_the_offset_not_a_cost_per_sequence() -> None:
    """A fixed cost the prefill fit has not learned (25 ms here) comes in every sample, alone
    or beside others; beside one sequence it is no 25 ms a sequence. Through the origin the
    first sample made it the whole slope; the line's offset takes it, and the slope is what
    each sequence adds (6 ms)."""
    rates = Rates(alpha=0.1)
    rates.observe_busy(MODEL, 1.0, 25.0 + 6.0)
    assert math.isnan(rates.learned_busy(MODEL))  # one sample: no slope yet
    for beside in (0.0, 1.0, 3.0, 2.0, 5.0) * 8:
        rates.observe_busy(MODEL, beside, 25.0 + 6.0 * beside)
    assert rates.busy_ms(MODEL) == pytest.approx(6.0)


def test_a_replica_seeded_from_the_clusters_sums_has_the_same_slope() -> None:
    first = Rates(alpha=0.1)
    for beside in (0.0, 1.0, 3.0, 2.0, 5.0) * 8:
        first.observe_busy(MODEL, beside, 25.0 + 6.0 * beside)
    pairs = [(beside, 25.0 + 6.0 * beside) for beside in (0.0, 1.0, 3.0, 2.0, 5.0)]
    means = (
        sum(x for x, _ in pairs) / 5, sum(y for _, y in pairs) / 5,
        sum(x * x for x, _ in pairs) / 5, sum(x * y for x, y in pairs) / 5,
    )  # fmt: skip
    seeded = Rates()
    seeded.seed_busy(MODEL, means)
    assert seeded.busy_ms(MODEL) == pytest.approx(first.busy_ms(MODEL))
    old = Rates()  # minutes written before the sequences and excess sums: through the origin
    old.seed_busy(MODEL, (0.0, 0.0, 4.0, 4.0 * 10.0))
    assert old.busy_ms(MODEL) == pytest.approx(10.0)

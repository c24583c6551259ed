"""The pending-prefill share (of the other prompts' prefill pending ahead on a worker, what
a new request waits for): learned per model from the reports, journalled, merged from the
other replicas, exported; and what it changes in a Pick: on engines that prefill prompts
side by side a cache hit behind a document's prefill stays on its cache."""

from __future__ import annotations

import json
import math
import random

import pytest

from kinference.bodies import Body
from kinference.config import parse_policy
from kinference.ops.routing_collector import RoutingCollector
from kinference.requests import parse_request
from kinference.routing import PrefixIndex, ProviderHealth, RouteQuery, Router, TenantGate
from kinference.routing.decision import LocalChoice
from kinference.routing.journal import NullJournal
from kinference.routing.learning import Learning, Served
from kinference.routing.pending import PendingPrefix, waited_prefill
from kinference.routing.policy import cooldowns_of
from kinference.routing.rates import (
    MAX_BUSY_MODELS,
    MIN_PENDING_SAMPLE_MS,
    Rates,
    pending_sample,
)
from kinference.routing.table import WorkerTable
from tests.routing.plugin_helpers import MODEL
from tests.routing.test_busy import samples


class Samples(NullJournal):
    """A journal keeping the pending-share samples this replica would publish."""

    def __init__(self) -> None:
        self.pending_samples: list[tuple[str, str, float, float]] = []

    def pending(self, endpoint: str, model: str, pending_ms: float, excess_ms: float) -> None:
        self.pending_samples.append((endpoint, model, pending_ms, excess_ms))


def test_without_samples_the_share_is_the_policys_prior() -> None:
    rates = Rates()
    assert rates.pending_share(MODEL) == 1.0  # vLLM's scheduler: the whole rest
    assert math.isnan(rates.learned_pending_share(MODEL))
    rates.prior_pending_share = 0.25
    assert rates.pending_share(MODEL) == 0.25


def test_engines_that_prefill_side_by_side_teach_no_wait_and_vllm_the_whole() -> None:
    side_by_side, in_turn = Rates(), Rates()
    noise = random.Random(1)
    for _ in range(30):
        wait = noise.uniform(5.0, 400.0)
        side_by_side.observe_pending(MODEL, wait, noise.gauss(0.0, 3.0))
        in_turn.observe_pending(MODEL, wait, wait + noise.gauss(0.0, 3.0))
    assert side_by_side.pending_share(MODEL) == pytest.approx(0.0, abs=0.05)
    assert in_turn.pending_share(MODEL) == pytest.approx(1.0, abs=0.05)


def test_the_first_sample_decides_and_a_long_wait_outweighs_short_ones() -> None:
    """The prior keeps requests off workers with much pending, so samples are few: the
    first one sets the fit. A sample weighs its wait squared: one document's prefill
    waited for in full outvotes many short waits' noise."""
    rates = Rates()
    rates.observe_pending(MODEL, 20.0, 0.0)
    assert rates.pending_share(MODEL) == 0.0
    for _ in range(10):
        rates.observe_pending(MODEL, 4.0, -1.0)
    rates.observe_pending(MODEL, 500.0, 480.0)
    assert rates.pending_share(MODEL) > 0.9


@pytest.mark.parametrize(
    ("pending", "excess"),
    [(MIN_PENDING_SAMPLE_MS / 2, 0.0), (1e12, 1.0), (math.nan, 1.0), (50.0, math.nan),
     (-5.0, 1.0), (math.inf, 1.0)],
)  # fmt: skip
def test_a_short_or_hostile_sample_teaches_nothing(pending: float, excess: float) -> None:
    rates = Rates()
    assert pending_sample(pending, excess) is None
    assert not rates.observe_pending(MODEL, pending, excess)
    assert math.isnan(rates.learned_pending_share(MODEL))


def test_a_sample_counts_within_minus_its_wait_and_twice_it() -> None:
    assert pending_sample(10.0, -1e300) == (10.0, -10.0)
    assert pending_sample(10.0, 1e300) == (10.0, 20.0)
    rates = Rates()
    rates.observe_pending(MODEL, 10.0, 1e300)
    assert rates.pending_share(MODEL) == 1.0  # the fit stays within 0..1


def test_the_models_with_a_share_fit_are_bounded() -> None:
    rates = Rates()
    for n in range(MAX_BUSY_MODELS + 10):
        rates.observe_pending(f"model-{n}", 10.0, 5.0)
    assert math.isnan(rates.learned_pending_share("model-0"))
    assert rates.learned_pending_share(f"model-{MAX_BUSY_MODELS + 9}") == 0.5


def test_waited_prefill_scales_the_rest_by_the_share() -> None:
    table = WorkerTable(clock=lambda: 0.0)
    slot = table.slot("a:1")
    table.start_prefill(slot, "doc", PendingPrefix((1, 2, 3), 0, 1200.0, 400.0))
    whole = waited_prefill(table, slot, 1200.0, per_token=0.05, cached=0.0, hashes=())
    half = waited_prefill(table, slot, 1200.0, per_token=0.05, cached=0.0, hashes=(),
                          share=0.5)  # fmt: skip
    assert (whole, half) == (1200.0, 600.0)


def learned(slot: int) -> Learning:
    """A Learning whose worker `slot` prefills in 10 ms + 0.05 ms a token, alone."""
    learn = Learning(WorkerTable(), PrefixIndex(10_000), Samples())
    for tokens in (200, 1800, 600, 1400, 1000) * 4:
        learn.final(choice(slot, prompt_tokens=float(tokens)),
                    Served(tokens, 0, (), 10.0 + 0.05 * tokens, None))  # fmt: skip
    return learn


def choice(slot: int, **fields: object) -> LocalChoice:
    fields.setdefault("predicted_ttft_ms", 100.0)
    fields.setdefault("sequences", 1.0)
    return LocalChoice(f"10.0.0.{slot}:8000", slot, "default/pool", MODEL, **fields)  # type: ignore[arg-type]


def test_a_report_behind_pending_prefill_teaches_the_share_and_is_journalled() -> None:
    learn = learned(1)
    journal = learn.journal
    assert isinstance(journal, Samples)
    behind = choice(1, prompt_tokens=1000.0, pending_ms=80.0, predicted_wait_ms=80.0)
    learn.final(behind, Served(1000, 0, (), 60.0, None))  # 60 ms: its own prefill alone
    assert learn.rates.pending_share(MODEL) == pytest.approx(0.0, abs=0.01)
    assert journal.pending_samples == [("10.0.0.1:8000", MODEL, 80.0, pytest.approx(0.0))]


def test_no_sample_behind_a_batch_queue_or_without_a_learned_prefill() -> None:
    learn = learned(1)
    queued = choice(1, prompt_tokens=1000.0, pending_ms=80.0, predicted_wait_ms=280.0)
    learn.final(queued, Served(1000, 0, (), 360.0, None))  # 200 ms of it for a slot
    unknown = choice(2, prompt_tokens=1000.0, pending_ms=80.0, predicted_wait_ms=80.0)
    learn.final(unknown, Served(1000, 0, (), 60.0, None))  # worker 2 not learned
    assert math.isnan(learn.rates.learned_pending_share(MODEL))


def test_another_replicas_samples_and_the_export() -> None:
    policy = parse_policy(
        'pools:\n  - {name: p, endpoints: ["10.0.0.1:8000"], models: ["m", "n"]}\n'
    )
    r = Router(
        policy, table=WorkerTable(), prefix=PrefixIndex(1000),
        health=ProviderHealth(cooldowns_of(policy)), tenants=TenantGate(),
        rng=random.Random(0),
    )  # fmt: skip
    r.remote_pending("10.0.0.1:8000", "m", 100.0, 30.0)
    rates = samples(list(RoutingCollector(r).collect()), "kinference_model_learned_rate")  # type: ignore[arg-type]
    assert rates["m", "pending_prefill_share"] == pytest.approx(0.3)
    assert math.isnan(rates["n", "pending_prefill_share"])  # the prior in use


SYSTEM = "You answer questions about the policy. " * 150  # ~1.5k tokens
DOCUMENT = "A long document nobody has read yet. " * 1300  # ~12k tokens


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def question(system: str, n: int) -> RouteQuery:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": f"q{n}"}]
    raw = json.dumps({"model": MODEL, "messages": messages}).encode()
    return RouteQuery(parse_request(Body([raw], reserved=len(raw))))


def serve(r: Router, clock: Clock, n: int, ttft_ms: float) -> LocalChoice:
    """A question on the system prompt routed, its first token `ttft_ms` later, done."""
    local = r.route(question(SYSTEM, n)).local
    assert local is not None
    r.picked(local)
    clock.now += ttft_ms / 1000.0
    r.first_token(local, ttft_ms)
    r.final(local, Served(round(local.prompt_tokens), round(local.cached_tokens), (),
                          ttft_ms, 500.0))  # fmt: skip
    clock.now += 1.0
    return local


def scenario(waits: bool) -> tuple[str, str]:
    """Engines of a pool that prefill prompts side by side (`waits` False, the benchmark's
    simulated ones) or one after the other (True, vLLM): questions on a system prompt
    learn its engine's prefill; one asked while another prompt's 30 ms prefill is pending
    there reports its TTFT; then a 12k-token document goes to that engine (another
    replica's pick) and the next question comes right after. Answers (the system prompt's
    engine, the last question's)."""
    clock = Clock()
    endpoints = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"]
    policy = parse_policy(f"pools:\n  - {{name: p, endpoints: {json.dumps(endpoints)}, "
                          "models: [m]}\n")  # fmt: skip
    r = Router(
        policy, table=WorkerTable(clock=clock), prefix=PrefixIndex(50_000),
        health=ProviderHealth(cooldowns_of(policy)), tenants=TenantGate(),
        rng=random.Random(0), clock=clock,
    )  # fmt: skip
    home = serve(r, clock, 0, 165.0).endpoint  # cold: ~1.5k tokens at 0.1 ms
    for n in range(1, 6):  # hits: ~16 ms
        assert serve(r, clock, n, 15.0 + n % 2).endpoint == home
    short = PendingPrefix((7, 8), 0, 300.0, 16.0)  # another replica's prompt: 30 ms
    r.remote_prefilling("other", home, 1, short)
    behind = serve(r, clock, 6, 46.0 if waits else 16.0)
    assert behind.endpoint == home and behind.pending_ms > 20.0
    r.remote_prefilled("other", home, 1)
    document = PendingPrefix((9, 10), 0, 12_000.0, 16.0)
    r.remote_prefilling("other", home, 2, document)
    local = r.route(question(SYSTEM, 7)).local
    assert local is not None
    return home, local.endpoint


def test_side_by_side_prefill_learned_keeps_a_hit_behind_a_document_on_its_cache() -> None:
    """The vllm-64 benchmark at 6 req/s (h92, h98): a system prompt's question arriving
    right after a cold document that went to the system prompt's engine was sent cold,
    priced as waiting for the document's prefill, which the simulated engines do not
    impose. Once a report showed no such wait, it stays on its cache."""
    home, chosen = scenario(waits=False)
    assert chosen == home


def test_in_turn_prefill_learned_still_sends_it_elsewhere() -> None:
    """On vLLM (a prompt being prefilled runs first) the wait is real: ~1.2 s of the
    document's prefill against a cold prefill of ~0.2 s elsewhere."""
    home, chosen = scenario(waits=True)
    assert chosen != home

"""Router decisions with real compiled policies: names, targets, readiness, saturation and
QoS, providers and their health, tenants, scoring and prefix affinity."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from kinference.bodies import Body
from kinference.config import parse_policy
from kinference.requests import InferenceRequest, Shape, parse_request
from kinference.routing import (
    Decision,
    InFlight,
    Outcome,
    PrefixIndex,
    ProviderHealth,
    QoS,
    RouteQuery,
    Router,
    TenantGate,
    WorkerTable,
    compile_policy,
)
from kinference.routing.health import RATE_LIMITED, UNAUTHORIZED
from tests.clock import FakeClock

# Two pools serving `llama` (implicit: one candidate set), one more model on `big`.
IMPLICIT = """
pools:
  - namespace: default
    name: chat
    endpoints: ["10.0.0.5:8000", "10.0.0.6:8000", "10.0.0.7:8000"]
    models: ["llama"]
  - namespace: team-b
    name: big
    endpoints: ["10.0.1.5:8000"]
    models: ["llama", "qwen"]
  - namespace: team-b
    name: scaled-to-zero
    endpoints: []
    models: ["phi"]
"""
# The weighted scorers of earlier releases (GIE's weights), for the tests of those scorers.
WEIGHTED = """
routing:
  weights: {ttft: 0, prefix: 3, queue: 2, kv_cache: 2, latency: 1, lora: 1}
"""
CHAT = "default/chat"
BIG = "team-b/big"
CHAT_ENDPOINTS = ("10.0.0.5:8000", "10.0.0.6:8000", "10.0.0.7:8000")
BIG_ENDPOINT = "10.0.1.5:8000"

# Explicit models with targets in order, conditions and providers.
EXPLICIT = """
pools:
  - {name: chat, endpoints: ["10.0.0.5:8000", "10.0.0.6:8000"], models: [llama-8b-instruct]}
  - {name: big, endpoints: ["10.0.0.9:8000"], models: [llama-70b-instruct]}
providers:
  - {namespace: ai, name: openai, api: openai}
  - {namespace: ai, name: azure, api: azure-openai}
models:
  - name: llama
    aliases: [llama3]
    targets:
      - {pool: default/big, model: llama-70b-instruct, when: {hint: large}}
      - {pool: default/big, model: llama-70b-instruct, when: {min_prompt_tokens: 1000}}
      - {pool: default/chat, model: llama-8b-instruct}
      - provider: ai/openai
        model: gpt-4o-mini
        use: overflow
        max_tokens_field: max_completion_tokens
  - name: tools
    targets:
      - {pool: default/big, model: llama-70b-instruct, when: {tools: true}}
      - {pool: default/chat, model: llama-8b-instruct, when: {tools: false, max_prompt_tokens: 100}}
  - name: ordered
    targets:
      - {pool: default/chat, model: llama-8b-instruct}
      - {pool: default/big, model: llama-70b-instruct}
  - name: gpt
    targets:
      - {provider: ai/azure, model: gpt-4o-deployment}
      - {provider: ai/openai, model: gpt-4o}
"""
SMALL = ("10.0.0.5:8000", "10.0.0.6:8000")
LARGE = "10.0.0.9:8000"


@dataclass
class Env:
    router: Router
    table: WorkerTable
    inflight: InFlight
    health: ProviderHealth
    tenants: TenantGate
    clock: FakeClock

    def route(
        self,
        request: InferenceRequest,
        *,
        pool: str | None = None,
        qos: QoS = QoS.INTERACTIVE,
        tenant: str = "",
    ) -> Decision:
        return self.router.route(RouteQuery(request, pool, qos, tenant))

    def endpoint(self, request: InferenceRequest, **kw: Any) -> str:
        decision = self.route(request, **kw)
        assert decision.local is not None, decision
        return decision.local.endpoint

    def endpoints(self, request: InferenceRequest, times: int = 40, **kw: Any) -> set[str]:
        return {self.endpoint(request, **kw) for _ in range(times)}

    def slot(self, endpoint: str) -> int:
        return self.table.slot(endpoint)

    def engine(self, endpoint: str, waiting: float | None, kv: float | None = 0.0) -> None:
        """A reading the scraper takes now (on the router's clock)."""
        self.table.set_engine(
            self.slot(endpoint), waiting=waiting, running=1, kv_usage=kv, scraped_at=self.clock()
        )

    def unready(self, *endpoints: str) -> None:
        for endpoint in endpoints:
            self.table.ready[self.slot(endpoint)] = False

    def load(self, endpoint: str, requests: int) -> None:
        self.table.inflight[self.slot(endpoint)] = requests


def make(policy_text: str, seed: int = 0) -> Env:
    policy = parse_policy(policy_text)
    table = WorkerTable()
    clock = FakeClock()
    compiled = compile_policy(policy, table)
    health = ProviderHealth(compiled.cooldowns, clock=clock)
    tenants = TenantGate(clock)
    router = Router(
        policy,
        table=table,
        prefix=PrefixIndex(policy.routing.prefix.lru_blocks_per_worker),
        health=health,
        tenants=tenants,
        rng=random.Random(seed),
        clock=clock,
    )
    return Env(router, table, InFlight(table, 60.0, clock=clock), health, tenants, clock)


def parse(doc: dict[str, Any]) -> InferenceRequest:
    data = json.dumps(doc).encode()
    return parse_request(Body([data], reserved=len(data)))


def chat(model: str = "llama", content: str = "hello", **extra: Any) -> InferenceRequest:
    return parse({"model": model, "messages": [{"role": "user", "content": content}], **extra})


SHAPES: dict[str, dict[str, Any]] = {
    "chat": {"messages": [{"role": "user", "content": "hi"}]},
    "completion": {"prompt": "Say this is a test"},
    "embeddings": {"input": "The food was delicious", "encoding_format": "float"},
    "responses": {"input": "Tell me a story", "instructions": "Be brief."},
    "anthropic": {"system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]},
}


def shaped(model: str, shape: str) -> InferenceRequest:
    return parse({"model": model, **SHAPES[shape]})


LONG_PROMPT = " ".join(f"word{i}" for i in range(400))  # about 2.8 KB: 40+ blocks


# --- ported from the least-loaded picker ---------------------------------------------------


def test_query_defaults() -> None:
    query = RouteQuery(chat())
    assert (query.pool, query.qos, query.tenant) == (None, QoS.INTERACTIVE, "")


def test_outcome_values_are_metric_labels() -> None:
    assert [o.value for o in Outcome] == [
        "ok",
        "no_workers",
        "degraded",
        "bad_request",
        "policy_rejected",
    ]


def test_least_loaded_wins_across_the_pools_of_an_implicit_model() -> None:
    env = make(IMPLICIT)
    for endpoint in (*CHAT_ENDPOINTS[:2], BIG_ENDPOINT):
        env.load(endpoint, 1)
    for _ in range(20):
        decision = env.route(chat())
        assert decision.outcome == Outcome.OK
        assert decision.local is not None
        assert decision.local.endpoint == CHAT_ENDPOINTS[2]
        assert decision.local.pool == CHAT
        assert decision.reason == ""
    for endpoint in CHAT_ENDPOINTS:
        env.load(endpoint, 2)
    decision = env.route(chat())
    assert decision.local is not None
    assert (decision.local.endpoint, decision.local.pool) == (BIG_ENDPOINT, BIG)


def test_ties_are_broken_at_random_and_fairly() -> None:
    env = make(IMPLICIT, seed=42)
    picks = Counter(env.endpoint(chat()) for _ in range(4000))
    assert set(picks) == {*CHAT_ENDPOINTS, BIG_ENDPOINT}
    assert all(800 < n < 1200 for n in picks.values())


def test_seeded_router_is_deterministic() -> None:
    env_a, env_b = make(IMPLICIT, seed=3), make(IMPLICIT, seed=3)
    seq_a = [env_a.route(chat()).local for _ in range(50)]
    seq_b = [env_b.route(chat()).local for _ in range(50)]
    assert seq_a == seq_b
    assert len(set(seq_a)) > 1


def test_load_spreads_when_picks_stay_in_flight() -> None:
    env = make(IMPLICIT, seed=1)
    for response_id in range(1, 9):
        decision = env.route(chat())
        assert decision.local is not None
        env.inflight.add(response_id, decision.local, "")
    assert sorted(env.inflight.per_endpoint().values()) == [2, 2, 2, 2]


def test_named_pool_restricts_the_choice() -> None:
    env = make(IMPLICIT)
    env.load(BIG_ENDPOINT, 10)  # much busier than the chat pool
    decision = env.route(chat(), pool=BIG)
    assert decision.local is not None
    assert (decision.local.endpoint, decision.local.pool) == (BIG_ENDPOINT, BIG)
    assert env.endpoints(chat(), pool=CHAT) <= set(CHAT_ENDPOINTS)
    assert env.endpoints(chat("qwen"), pool=BIG) == {BIG_ENDPOINT}


@pytest.mark.parametrize(
    ("model", "pool", "reason"),
    [
        ("gpt-9", None, "no pool or provider serves model 'gpt-9'"),
        ("Llama", None, "no pool or provider serves model 'Llama'"),  # names are exact
        ("qwen", CHAT, "the named pool default/chat does not serve 'qwen'"),
        ("llama", "default/nope", "pool default/nope is not known"),
        ("llama", "other/chat", "pool other/chat is not known"),
        ("phi", None, "pool team-b/scaled-to-zero has no ready endpoint"),
        ("phi", "team-b/scaled-to-zero", "pool team-b/scaled-to-zero has no ready endpoint"),
    ],
)
def test_no_workers_with_a_reason(model: str, pool: str | None, reason: str) -> None:
    decision = make(IMPLICIT).route(chat(model), pool=pool)
    assert decision.outcome == Outcome.NO_WORKERS
    assert not decision.dispatches
    assert decision.local is None and decision.provider is None
    assert decision.reason == reason


def test_empty_policy_has_no_workers() -> None:
    decision = make("").route(chat())
    assert decision.outcome == Outcome.NO_WORKERS
    assert "'llama'" in decision.reason


# --- names and targets ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["llama", "llama3"])
def test_alias_resolution(name: str) -> None:
    env = make(EXPLICIT)
    decision = env.route(chat(name))
    assert decision.outcome == Outcome.OK
    assert decision.canonical_model == "llama"
    assert decision.served_model == "llama-8b-instruct"
    assert decision.local is not None
    assert decision.local.pool == "default/chat"
    assert decision.local.model == "llama-8b-instruct"
    assert decision.local.endpoint in SMALL
    assert decision.max_tokens_field is None


def test_a_pool_model_is_routable_by_its_own_name() -> None:
    env = make(EXPLICIT)
    decision = env.route(chat("llama-70b-instruct"))
    assert decision.local is not None
    assert decision.local.endpoint == LARGE
    assert decision.canonical_model == "llama-70b-instruct"


def test_targets_in_order() -> None:
    env = make(EXPLICIT)
    assert env.endpoints(chat("ordered")) <= set(SMALL)
    env.load(SMALL[0], 50)
    env.load(SMALL[1], 50)  # busy, but not saturated (no engine metrics): still first
    assert env.endpoints(chat("ordered")) <= set(SMALL)
    env.unready(*SMALL)
    decision = env.route(chat("ordered"))
    assert decision.local is not None
    assert (decision.local.endpoint, decision.local.model) == (LARGE, "llama-70b-instruct")


def test_when_hint() -> None:
    env = make(EXPLICIT)
    hinted = chat(kinference={"hint": "large"})
    decision = env.route(hinted)
    assert decision.local is not None
    assert (decision.local.endpoint, decision.served_model) == (LARGE, "llama-70b-instruct")
    assert env.endpoints(chat(kinference={"hint": "other"})) <= set(SMALL)


def test_when_prompt_tokens() -> None:
    env = make(EXPLICIT)
    short, long = chat(content="x" * 100), chat(content="x" * 5000)
    assert short.token_estimate < 1000 <= long.token_estimate
    assert env.endpoints(short) <= set(SMALL)
    assert env.endpoints(long) == {LARGE}


@pytest.mark.parametrize(
    ("content", "tools", "expected"),
    [
        ("hi", True, LARGE),
        ("x" * 2000, True, LARGE),
        ("hi", False, "small"),
        ("x" * 2000, False, None),  # too long for the tool-less target: nothing matches
    ],
)
def test_when_tools_and_max_prompt_tokens(content: str, tools: bool, expected: str | None) -> None:
    env = make(EXPLICIT)
    extra: dict[str, Any] = {}
    if tools:
        extra["tools"] = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    decision = env.route(chat("tools", content, **extra))
    if expected is None:
        assert decision.outcome == Outcome.NO_WORKERS
        assert decision.reason == "no target of 'tools' matches"
    elif expected == "small":
        assert decision.local is not None and decision.local.endpoint in SMALL
    else:
        assert decision.local is not None and decision.local.endpoint == expected


def test_named_pool_with_explicit_targets() -> None:
    env = make(EXPLICIT)
    # The first matching target is the chat pool, but the caller named big.
    decision = env.route(chat("ordered"), pool="default/big")
    assert decision.local is not None
    assert decision.local.endpoint == LARGE
    decision = env.route(chat("llama-70b-instruct"), pool="default/chat")
    assert decision.outcome == Outcome.NO_WORKERS
    assert decision.reason == "the named pool default/chat does not serve 'llama-70b-instruct'"


def test_not_ready_workers_are_skipped() -> None:
    env = make(IMPLICIT)
    env.unready(CHAT_ENDPOINTS[0], BIG_ENDPOINT)
    assert env.endpoints(chat(), 100) == set(CHAT_ENDPOINTS[1:])
    env.unready(*CHAT_ENDPOINTS)
    decision = env.route(chat())
    assert decision.outcome == Outcome.NO_WORKERS
    assert decision.reason == "pool default/chat, team-b/big has no ready endpoint"
    env.table.ready[env.slot(BIG_ENDPOINT)] = True
    assert env.endpoints(chat()) == {BIG_ENDPOINT}


def test_decision_carries_target_settings() -> None:
    env = make(EXPLICIT)
    env.unready(*SMALL, LARGE)
    decision = env.route(chat("llama3", max_tokens=5))
    assert decision.outcome == Outcome.OK
    assert decision.provider is not None
    assert decision.local is None
    assert decision.max_tokens_field == "max_completion_tokens"
    assert decision.served_model == "gpt-4o-mini"
    assert decision.canonical_model == "llama"
    assert decision.prefix_hashes == ()


# --- saturation and QoS ---------------------------------------------------------------------


def saturated_env(waiting: float = 5, policy: str = EXPLICIT) -> Env:
    env = make(policy)
    for endpoint in SMALL:
        env.engine(endpoint, waiting)
    return env


def test_a_free_worker_wins_over_saturated_ones_for_every_class() -> None:
    env = make(EXPLICIT)
    env.engine(SMALL[0], 7)
    env.engine(SMALL[1], 0)
    for qos in QoS:
        assert env.endpoints(chat("ordered"), qos=qos) == {SMALL[1]}


def test_saturated_primary_passes_to_the_next_primary() -> None:
    env = saturated_env()
    for qos in QoS:
        decision = env.route(chat("ordered"), qos=qos)
        assert decision.outcome == Outcome.OK
        assert decision.local is not None
        assert decision.local.endpoint == LARGE


def test_deferrable_is_shed_first() -> None:
    env = saturated_env()
    decision = env.route(chat(), qos=QoS.DEFERRABLE)
    assert decision.outcome == Outcome.POLICY_REJECTED
    assert not decision.dispatches
    assert "saturated" in decision.reason
    assert "default/chat" in decision.reason
    assert "DEFERRABLE" in decision.reason


def test_kv_cache_saturates_too() -> None:
    env = make(EXPLICIT)
    for endpoint in SMALL:
        env.engine(endpoint, 0, kv=0.85)
    assert env.route(chat(), qos=QoS.DEFERRABLE).outcome == Outcome.POLICY_REJECTED


def test_a_reading_older_than_stale_after_is_ignored() -> None:
    """A saturated reading not renewed for longer than engine_metrics.stale_after_s (1 s by
    default) is unknown, and unknown is not saturated: every class is served locally."""
    env = saturated_env(waiting=10)  # overloaded
    assert env.router.policy.engine_stale_after_s == 1.0
    assert env.route(chat(), qos=QoS.DEFERRABLE).outcome == Outcome.POLICY_REJECTED
    env.clock.now += 1.0  # exactly stale_after_s old: still counts
    assert env.route(chat(), qos=QoS.DEFERRABLE).outcome == Outcome.POLICY_REJECTED
    assert env.route(chat(), qos=QoS.INTERACTIVE).provider is not None  # overflows
    env.clock.now += 0.001
    for qos in QoS:
        decision = env.route(chat(), qos=qos)
        assert decision.outcome == Outcome.OK, qos
        assert decision.local is not None, qos  # not shed, and no overflow either
        assert decision.local.endpoint in SMALL
    assert env.endpoints(chat(), qos=QoS.DEFERRABLE) == set(SMALL)
    # A fresh reading counts again.
    for endpoint in SMALL:
        env.engine(endpoint, 10)
    assert env.route(chat(), qos=QoS.DEFERRABLE).outcome == Outcome.POLICY_REJECTED


def test_only_the_stale_reading_is_ignored() -> None:
    env = make(EXPLICIT)
    env.engine(SMALL[0], 10)
    env.clock.now += 0.8
    env.engine(SMALL[1], 10)
    env.clock.now += 0.5  # SMALL[0]'s reading is 1.3 s old, SMALL[1]'s 0.5 s
    assert env.endpoints(chat(), qos=QoS.DEFERRABLE) == {SMALL[0]}


def test_stale_after_comes_from_the_policy() -> None:
    env = saturated_env(
        waiting=10, policy=EXPLICIT + "routing:\n  engine_metrics: {stale_after_s: 5}\n"
    )
    assert env.router.policy.engine_stale_after_s == 5
    env.clock.now += 4.9
    assert env.route(chat(), qos=QoS.DEFERRABLE).outcome == Outcome.POLICY_REJECTED
    env.clock.now += 0.2
    assert env.route(chat(), qos=QoS.DEFERRABLE).outcome == Outcome.OK


def test_the_router_ages_readings_on_the_monotonic_clock_by_default() -> None:
    """Without a clock the router reads time.monotonic(), the engine scraper's clock."""
    env = saturated_env(waiting=10)
    env.router = Router(
        env.router.policy.config,
        table=env.table,
        prefix=env.router.prefix,
        health=env.health,
        tenants=env.tenants,
        rng=random.Random(0),
    )
    for endpoint in SMALL:
        env.table.set_engine(
            env.slot(endpoint), waiting=10, running=1, kv_usage=0, scraped_at=time.monotonic()
        )
    assert env.route(chat(), qos=QoS.DEFERRABLE).outcome == Outcome.POLICY_REJECTED
    for endpoint in SMALL:  # taken long ago on that clock
        env.table.scraped_at[env.slot(endpoint)] = time.monotonic() - 60
    assert env.route(chat(), qos=QoS.DEFERRABLE).outcome == Outcome.OK


def test_stale_readings_no_longer_steer_the_scores() -> None:
    env = make(NO_OVERFLOW + WEIGHTED)
    env.engine(SMALL[0], 0, kv=0.7)
    env.engine(SMALL[1], 0, kv=0.1)
    assert env.endpoints(chat()) == {SMALL[1]}
    env.clock.now += 0.6
    env.engine(SMALL[1], 0, kv=0.1)
    env.clock.now += 0.6  # SMALL[0]'s 0.7 is stale: unknown, scored as the known 0.1
    assert env.endpoints(chat()) == set(SMALL)
    env.clock.now += 1.0  # both stale: both unknown
    assert env.endpoints(chat()) == set(SMALL)


def test_batch_joins_a_saturated_worker() -> None:
    env = saturated_env()
    decision = env.route(chat(), qos=QoS.BATCH)
    assert decision.outcome == Outcome.OK
    assert decision.local is not None
    assert decision.local.endpoint in SMALL


def test_batch_avoids_overloaded_workers() -> None:
    env = make(EXPLICIT)
    env.engine(SMALL[0], 10)  # overloaded
    env.engine(SMALL[1], 6)  # saturated
    assert env.endpoints(chat(), qos=QoS.BATCH) == {SMALL[1]}


def test_batch_is_shed_when_overloaded() -> None:
    env = saturated_env(waiting=10)
    decision = env.route(chat(), qos=QoS.BATCH)
    assert decision.outcome == Outcome.POLICY_REJECTED
    assert "saturated" in decision.reason
    assert "BATCH" in decision.reason
    assert env.route(chat(), qos=QoS.DEFERRABLE).outcome == Outcome.POLICY_REJECTED


def test_batch_uses_a_later_primary_pool_that_is_only_saturated() -> None:
    env = make(EXPLICIT)
    env.engine(SMALL[0], 10)  # the first primary target: overloaded
    env.engine(SMALL[1], 12)
    env.engine(LARGE, 5)  # the second: saturated only
    for _ in range(10):
        decision = env.route(chat("ordered"), qos=QoS.BATCH)
        assert decision.outcome == Outcome.OK
        assert decision.local is not None
        assert (decision.local.endpoint, decision.local.model) == (LARGE, "llama-70b-instruct")
    shed = env.route(chat("ordered"), qos=QoS.DEFERRABLE)
    assert shed.outcome == Outcome.POLICY_REJECTED
    assert "default/chat" in shed.reason and "default/big" in shed.reason
    env.engine(LARGE, 10)  # every primary overloaded: BATCH is shed
    shed = env.route(chat("ordered"), qos=QoS.BATCH)
    assert shed.outcome == Outcome.POLICY_REJECTED
    assert "BATCH" in shed.reason
    assert "default/chat" in shed.reason and "default/big" in shed.reason


def test_batch_prefers_the_first_primary_pool_below_the_limit() -> None:
    env = make(EXPLICIT)
    env.engine(SMALL[0], 6)
    env.engine(SMALL[1], 10)
    env.engine(LARGE, 5)
    assert env.endpoints(chat("ordered"), qos=QoS.BATCH) == {SMALL[0]}


def test_interactive_is_not_worse_off_than_batch_across_saturated_primaries() -> None:
    env = make(EXPLICIT)
    env.engine(SMALL[0], 10)  # overloaded
    env.engine(SMALL[1], 12)  # overloaded
    env.engine(LARGE, 5)  # saturated only
    assert env.endpoints(chat("ordered"), qos=QoS.BATCH) == {LARGE}
    assert env.endpoints(chat("ordered"), qos=QoS.INTERACTIVE) == {LARGE}


def test_interactive_overflows_to_a_provider() -> None:
    env = saturated_env(waiting=10)
    decision = env.route(chat(), qos=QoS.INTERACTIVE)
    assert decision.outcome == Outcome.OK
    assert decision.local is None
    assert decision.provider is not None
    assert decision.provider.ref == "ai/openai"
    assert decision.provider.model == "gpt-4o-mini"
    assert decision.provider.path == "/v1/chat/completions"


NO_OVERFLOW = """
pools:
  - {name: chat, endpoints: ["10.0.0.5:8000", "10.0.0.6:8000"], models: [llama-8b-instruct]}
models:
  - name: llama
    targets: [{pool: default/chat, model: llama-8b-instruct}]
"""


@pytest.mark.parametrize("waiting", [5, 10, 1000])
def test_interactive_without_overflow_takes_a_saturated_worker(waiting: float) -> None:
    env = saturated_env(waiting, NO_OVERFLOW)
    decision = env.route(chat(), qos=QoS.INTERACTIVE)
    assert decision.outcome == Outcome.OK  # never shed
    assert decision.local is not None
    assert decision.local.endpoint in SMALL


def test_interactive_takes_the_least_busy_saturated_worker() -> None:
    env = make(NO_OVERFLOW)
    env.engine(SMALL[0], 40)
    env.engine(SMALL[1], 6)
    assert env.endpoints(chat()) == {SMALL[1]}


def test_interactive_takes_a_saturated_worker_when_the_overflow_is_cooling() -> None:
    env = saturated_env()
    env.health.report("ai/openai", RATE_LIMITED)
    decision = env.route(chat())
    assert decision.outcome == Outcome.OK
    assert decision.local is not None
    assert decision.local.endpoint in SMALL


@pytest.mark.parametrize("qos", list(QoS))
def test_no_ready_workers_overflow_for_every_class(qos: QoS) -> None:
    env = make(EXPLICIT)
    env.unready(*SMALL)
    decision = env.route(chat(), qos=qos)
    assert decision.outcome == Outcome.OK
    assert decision.provider is not None
    assert decision.provider.ref == "ai/openai"


@pytest.mark.parametrize("qos", list(QoS))
def test_no_ready_workers_and_no_overflow(qos: QoS) -> None:
    env = make(NO_OVERFLOW)
    env.unready(*SMALL)
    decision = env.route(chat(), qos=qos)
    assert decision.outcome == Outcome.NO_WORKERS
    assert decision.reason == "pool default/chat has no ready endpoint"


OVERFLOW_POOL = """
pools:
  - {name: chat, endpoints: ["10.0.0.5:8000", "10.0.0.6:8000"], models: [llama-8b-instruct]}
  - {name: spare, endpoints: ["10.0.0.9:8000"], models: [llama-8b-instruct]}
models:
  - name: llama
    targets:
      - {pool: default/chat, model: llama-8b-instruct}
      - {pool: default/spare, model: llama-8b-instruct, use: overflow}
"""


@pytest.mark.parametrize("qos", list(QoS))
def test_overflow_pool_takes_requests_when_the_primary_has_no_ready_worker(qos: QoS) -> None:
    env = make(OVERFLOW_POOL)
    env.unready(*SMALL)
    decision = env.route(chat(), qos=qos)
    assert decision.outcome == Outcome.OK
    assert decision.local is not None
    assert (decision.local.endpoint, decision.local.pool) == (LARGE, "default/spare")


@pytest.mark.parametrize("waiting", [5, 10])
@pytest.mark.parametrize("qos", list(QoS))
def test_overflow_pool_takes_every_class_when_the_primary_is_saturated(
    qos: QoS, waiting: float
) -> None:
    """An overflow pool is our own spare capacity: every class uses it before QoS sheds."""
    env = saturated_env(waiting, OVERFLOW_POOL)
    decision = env.route(chat(), qos=qos)
    assert decision.outcome == Outcome.OK
    assert decision.local is not None
    assert (decision.local.endpoint, decision.local.pool) == (LARGE, "default/spare")
    assert decision.reason == ""


def test_saturated_primary_and_overflow_pools_fall_back_to_qos() -> None:
    env = saturated_env(10, OVERFLOW_POOL)  # the primary is overloaded
    env.engine(LARGE, 5)  # the overflow pool is saturated, below the BATCH limit
    shed = env.route(chat(), qos=QoS.DEFERRABLE)
    assert shed.outcome == Outcome.POLICY_REJECTED
    assert "DEFERRABLE" in shed.reason and "default/chat" in shed.reason
    assert env.endpoints(chat(), qos=QoS.BATCH) == {LARGE}
    interactive = env.route(chat(), qos=QoS.INTERACTIVE)
    assert interactive.outcome == Outcome.OK  # never shed
    assert interactive.local is not None
    env.engine(LARGE, 10)  # overloaded too: BATCH is shed as well
    shed = env.route(chat(), qos=QoS.BATCH)
    assert shed.outcome == Outcome.POLICY_REJECTED
    assert "BATCH" in shed.reason
    assert "default/chat" in shed.reason and "default/spare" in shed.reason
    assert env.route(chat(), qos=QoS.INTERACTIVE).local is not None


OVERFLOW_POOL_AND_PROVIDER = """
pools:
  - {name: chat, endpoints: ["10.0.0.5:8000", "10.0.0.6:8000"], models: [llama-8b-instruct]}
  - {name: spare, endpoints: ["10.0.0.9:8000"], models: [llama-8b-instruct]}
providers:
  - {namespace: ai, name: openai, api: openai}
models:
  - name: llama
    targets:
      - {pool: default/chat, model: llama-8b-instruct}
      - {pool: default/spare, model: llama-8b-instruct, use: overflow}
      - {provider: ai/openai, model: gpt-4o-mini, use: overflow}
"""


def _where(decision: Decision) -> str:
    if decision.local is not None:
        return decision.local.pool
    if decision.provider is not None:
        return decision.provider.ref
    return decision.outcome.value


def test_overflow_pool_first_then_the_provider_for_interactive_only() -> None:
    env = saturated_env(5, OVERFLOW_POOL_AND_PROVIDER)
    assert {qos: _where(env.route(chat(), qos=qos)) for qos in QoS} == {
        QoS.INTERACTIVE: "default/spare",
        QoS.BATCH: "default/spare",
        QoS.DEFERRABLE: "default/spare",
    }
    env.engine(LARGE, 5)  # the spare capacity is saturated too
    assert {qos: _where(env.route(chat(), qos=qos)) for qos in QoS} == {
        QoS.INTERACTIVE: "ai/openai",
        QoS.BATCH: "default/chat",  # the first busy pool below the BATCH limit
        QoS.DEFERRABLE: "policy_rejected",
    }
    env.unready(LARGE)  # the spare pool gone: the same
    assert {qos: _where(env.route(chat(), qos=qos)) for qos in QoS} == {
        QoS.INTERACTIVE: "ai/openai",
        QoS.BATCH: "default/chat",
        QoS.DEFERRABLE: "policy_rejected",
    }
    env.unready(*SMALL)  # nothing ready at all: every class overflows to the provider
    assert {qos: _where(env.route(chat(), qos=qos)) for qos in QoS} == {
        QoS.INTERACTIVE: "ai/openai",
        QoS.BATCH: "ai/openai",
        QoS.DEFERRABLE: "ai/openai",
    }


def test_interactive_takes_a_saturated_overflow_worker_when_no_primary_is_ready() -> None:
    env = make(OVERFLOW_POOL)
    env.unready(*SMALL)
    env.engine(LARGE, 7)
    decision = env.route(chat(), qos=QoS.INTERACTIVE)
    assert decision.outcome == Outcome.OK
    assert decision.local is not None
    assert decision.local.endpoint == LARGE


# --- providers ------------------------------------------------------------------------------

PROVIDERS = """
providers:
  - {namespace: ai, name: openai, api: openai}
  - {namespace: ai, name: azure, api: azure-openai}
  - {namespace: ai, name: azure-preview, api: azure-openai, api_version: "2025-04-01-preview"}
  - {namespace: ai, name: claude, api: anthropic-openai}
  - {namespace: ai, name: gemini, api: gemini-openai}
models:
  - {name: via-openai, targets: [{provider: ai/openai, model: gpt-4o}]}
  - {name: via-azure, targets: [{provider: ai/azure, model: gpt-4o-deployment}]}
  - {name: via-azure-preview, targets: [{provider: ai/azure-preview, model: my deployment}]}
  - {name: via-claude, targets: [{provider: ai/claude, model: claude-sonnet-4}]}
  - {name: via-gemini, targets: [{provider: ai/gemini, model: gemini-2.5-flash}]}
  - name: via-custom
    targets: [{provider: ai/claude, model: claude-sonnet-4, path: "/v1/messages?beta=true"}]
  - name: claude-then-openai
    targets:
      - {provider: ai/claude, model: claude-sonnet-4}
      - {provider: ai/openai, model: gpt-4o}
"""
AZURE = "/openai/deployments/gpt-4o-deployment"


@pytest.mark.parametrize(
    ("model", "shape", "path"),
    [
        ("via-openai", "chat", "/v1/chat/completions"),
        ("via-openai", "completion", "/v1/completions"),
        ("via-openai", "embeddings", "/v1/embeddings"),
        ("via-openai", "responses", "/v1/responses"),
        ("via-azure", "chat", f"{AZURE}/chat/completions?api-version=2024-10-21"),
        ("via-azure", "completion", f"{AZURE}/completions?api-version=2024-10-21"),
        ("via-azure", "embeddings", f"{AZURE}/embeddings?api-version=2024-10-21"),
        ("via-azure", "responses", "/openai/v1/responses"),
        (
            "via-azure-preview",
            "chat",
            "/openai/deployments/my%20deployment/chat/completions?api-version=2025-04-01-preview",
        ),
        ("via-claude", "chat", "/v1/chat/completions"),
        ("via-gemini", "chat", "/v1beta/openai/chat/completions"),
        ("via-gemini", "embeddings", "/v1beta/openai/embeddings"),
        ("via-custom", "chat", "/v1/messages?beta=true"),  # the target's own path wins
        ("via-custom", "embeddings", "/v1/messages?beta=true"),
        ("via-custom", "anthropic", "/v1/messages?beta=true"),
    ],
)
def test_provider_path_per_shape_and_api(model: str, shape: str, path: str) -> None:
    decision = make(PROVIDERS).route(shaped(model, shape))
    assert decision.outcome == Outcome.OK
    assert decision.provider is not None
    assert decision.provider.path == path
    assert decision.provider.ref == "ai/" + model.removeprefix("via-").replace("custom", "claude")


@pytest.mark.parametrize(
    ("model", "shape"),
    [
        ("via-claude", "embeddings"),
        ("via-claude", "completion"),
        ("via-claude", "responses"),
        ("via-gemini", "completion"),
        ("via-gemini", "responses"),
    ],
)
def test_unsupported_shape_is_skipped(model: str, shape: str) -> None:
    decision = make(PROVIDERS).route(shaped(model, shape))
    assert decision.outcome == Outcome.NO_WORKERS
    kind = "anthropic_messages" if shape == "anthropic" else shape
    provider = "ai/" + model.removeprefix("via-")
    assert decision.reason == f"provider {provider} has no endpoint for {kind} requests"


def test_anthropic_messages_to_an_openai_provider_are_translated_to_chat() -> None:
    decision = make(PROVIDERS).route(shaped("via-openai", "anthropic"))
    assert decision.outcome == Outcome.OK
    assert decision.provider is not None
    assert decision.provider.path == "/v1/chat/completions"
    assert decision.sent_shape is Shape.CHAT


def test_a_target_with_its_own_path_and_no_api_gets_requests_as_written() -> None:
    decision = make(PROVIDERS).route(shaped("via-custom", "anthropic"))
    assert decision.provider is not None
    assert decision.sent_shape is None


def test_unsupported_shape_falls_through_to_the_next_target() -> None:
    env = make(PROVIDERS)
    decision = env.route(shaped("claude-then-openai", "embeddings"))
    assert decision.provider is not None
    assert (decision.provider.ref, decision.provider.path) == ("ai/openai", "/v1/embeddings")
    decision = env.route(shaped("claude-then-openai", "chat"))
    assert decision.provider is not None
    assert decision.provider.ref == "ai/claude"


def test_cooled_provider_is_skipped() -> None:
    env = make(EXPLICIT)
    env.health.report("ai/azure", UNAUTHORIZED, "401")
    decision = env.route(chat("gpt"))
    assert decision.provider is not None
    assert (decision.provider.ref, decision.provider.model) == ("ai/openai", "gpt-4o")


def test_no_workers_names_the_cooled_providers() -> None:
    env = make(EXPLICIT)
    env.health.report("ai/azure", UNAUTHORIZED, "401")
    env.clock.now += 100
    env.health.report("ai/openai", RATE_LIMITED)
    decision = env.route(chat("gpt"))
    assert decision.outcome == Outcome.NO_WORKERS
    assert decision.reason == (
        "provider ai/azure is cooling down (backend_unauthorized, 200s left); "
        "provider ai/openai is cooling down (rate_limited, 10s left)"
    )
    env.clock.now += 10  # openai's cool-down ends
    decision = env.route(chat("gpt"))
    assert decision.provider is not None
    assert decision.provider.ref == "ai/openai"


def test_no_workers_names_every_reason() -> None:
    env = make(EXPLICIT)
    env.unready(*SMALL)
    env.health.report("ai/openai", UNAUTHORIZED)
    decision = env.route(chat())
    assert decision.outcome == Outcome.NO_WORKERS
    assert decision.reason == (
        "pool default/chat has no ready endpoint; "
        "provider ai/openai is cooling down (backend_unauthorized, 300s left)"
    )
    assert decision.canonical_model == "llama"


def test_provider_choice_is_ok_even_without_a_prompt_signal() -> None:
    env = make(PROVIDERS)
    request = parse({"model": "via-openai", "input": "hi", "previous_response_id": "resp_1"})
    assert not request.prompt.complete
    assert env.route(request).outcome == Outcome.OK


# --- tenants --------------------------------------------------------------------------------

TENANTS = (
    EXPLICIT
    + """
tenants:
  - {tenant: team-a, models: [llama3], qos: [INTERACTIVE], tokens_per_minute: 100}
  - {tenant: "", models: [gpt]}
default_tenant_action: reject
"""
)


def test_tenant_rules_apply() -> None:
    env = make(TENANTS)
    assert env.route(chat("llama"), tenant="team-a").outcome == Outcome.OK  # alias allows
    rejected = env.route(chat("gpt"), tenant="team-a")
    assert rejected.outcome == Outcome.POLICY_REJECTED
    assert rejected.reason == "tenant 'team-a' may not use model 'gpt'"
    rejected = env.route(chat("llama"), tenant="team-a", qos=QoS.BATCH)
    assert rejected.reason == "tenant 'team-a' may not use QoS class BATCH"
    assert env.route(chat("gpt"), tenant="").outcome == Outcome.OK
    rejected = env.route(chat("llama"), tenant="")
    assert rejected.reason == "the empty tenant may not use model 'llama'"
    rejected = env.route(chat("gpt"), tenant="team-z")
    assert rejected.outcome == Outcome.POLICY_REJECTED
    assert rejected.reason == "tenant 'team-z' matches no tenant rule"


def test_tenant_budget() -> None:
    env = make(TENANTS)
    env.tenants.record(env.router.policy.config, "team-a", 100)
    rejected = env.route(chat("llama"), tenant="team-a")
    assert rejected.outcome == Outcome.POLICY_REJECTED
    assert "budget" in rejected.reason
    env.clock.now += 61
    assert env.route(chat("llama"), tenant="team-a").outcome == Outcome.OK


def test_unknown_model_is_no_workers_before_tenant_rules() -> None:
    decision = make(TENANTS).route(chat("gpt-9"), tenant="team-z")
    assert decision.outcome == Outcome.NO_WORKERS


# --- prefix affinity and DEGRADED -----------------------------------------------------------


def test_degraded_when_the_prompt_is_incomplete() -> None:
    env = make(IMPLICIT)
    request = parse(
        {
            "model": "llama",
            "input": [{"role": "user", "content": "hi"}],
            "previous_response_id": "r1",
        }
    )
    decision = env.route(request)
    assert decision.outcome == Outcome.DEGRADED
    assert decision.dispatches
    assert decision.local is not None
    assert decision.reason.startswith("no full prefix-cache signal: ")
    assert "previous_response_id" in decision.reason


def test_prefix_hashes_are_seeded_by_the_served_model() -> None:
    env = make(EXPLICIT)
    small = env.route(chat("llama", LONG_PROMPT))
    large = env.route(chat("llama", LONG_PROMPT, kinference={"hint": "large"}))
    assert small.prefix_hashes and large.prefix_hashes
    assert len(small.prefix_hashes) == len(large.prefix_hashes)
    assert small.prefix_hashes[0] != large.prefix_hashes[0]
    assert small.local is not None
    assert small.local.prefix_total == len(small.prefix_hashes)
    assert small.local.prefix_blocks == 0  # nothing recorded yet


def test_short_prompts_have_no_blocks() -> None:
    decision = make(IMPLICIT).route(chat(content="hi"))
    assert decision.outcome == Outcome.OK
    assert decision.prefix_hashes == ()
    assert decision.local is not None
    assert decision.local.prefix_total == 0


@pytest.mark.parametrize("seed", range(5))
def test_affinity_sends_a_prompt_where_its_blocks_are(seed: int) -> None:
    env = make(IMPLICIT, seed=seed)
    first = env.route(chat(content=LONG_PROMPT))
    assert first.local is not None
    env.router.prefix.record(first.local.slot, first.prefix_hashes)
    for _ in range(20):
        again = env.route(chat(content=LONG_PROMPT))
        assert again.local is not None
        assert again.local.endpoint == first.local.endpoint
        assert again.local.prefix_blocks == again.local.prefix_total == len(first.prefix_hashes)
    # A conversation that continues the prompt follows it too.
    longer = env.route(chat(content=LONG_PROMPT + " and then some more words" * 20))
    assert longer.local is not None
    assert longer.local.endpoint == first.local.endpoint
    assert 0 < longer.local.prefix_blocks < longer.local.prefix_total


def test_affinity_survives_a_small_load_lead() -> None:
    env = make(IMPLICIT + WEIGHTED)
    first = env.route(chat(content=LONG_PROMPT))
    assert first.local is not None
    env.router.prefix.record(first.local.slot, first.prefix_hashes)
    env.load(first.local.endpoint, 10)  # 10 ahead of the others: within the balance
    assert env.endpoints(chat(content=LONG_PROMPT)) == {first.local.endpoint}


def test_hot_spot_protection_load_wins() -> None:
    env = make(IMPLICIT)
    first = env.route(chat(content=LONG_PROMPT))
    assert first.local is not None
    hot = first.local.endpoint
    env.router.prefix.record(first.local.slot, first.prefix_hashes)
    env.load(hot, 17)  # more than 16 ahead, and more than 1.5x: affinity is switched off
    chosen = env.endpoints(chat(content=LONG_PROMPT), 100)
    assert hot not in chosen
    assert len(chosen) == 3  # spread over the idle workers
    decision = env.route(chat(content=LONG_PROMPT))
    assert decision.local is not None
    assert decision.local.prefix_blocks == 0


def test_hot_spot_protection_counts_the_engine_queue() -> None:
    env = make(IMPLICIT + WEIGHTED)
    first = env.route(chat(content=LONG_PROMPT))
    assert first.local is not None
    env.router.prefix.record(first.local.slot, first.prefix_hashes)
    env.engine(first.local.endpoint, waiting=4)  # below saturation
    env.load(first.local.endpoint, 14)  # 18 in all
    assert first.local.endpoint not in env.endpoints(chat(content=LONG_PROMPT))
    env.clock.now += 2  # the queue reading is stale: 14 in flight is within the balance
    assert env.endpoints(chat(content=LONG_PROMPT)) == {first.local.endpoint}


def test_policy_weights_reach_the_scorers() -> None:
    env = make(IMPLICIT + "routing:\n  weights: {ttft: 0, prefix: 0, queue: 2}\n")
    first = env.route(chat(content=LONG_PROMPT))
    assert first.local is not None
    env.router.prefix.record(first.local.slot, first.prefix_hashes)
    env.load(first.local.endpoint, 1)
    assert first.local.endpoint not in env.endpoints(chat(content=LONG_PROMPT))


def test_kv_cache_and_latency_steer_the_choice() -> None:
    env = make(NO_OVERFLOW + WEIGHTED)
    env.engine(SMALL[0], 0, kv=0.7)
    env.engine(SMALL[1], 0, kv=0.1)
    assert env.endpoints(chat()) == {SMALL[1]}
    env.engine(SMALL[1], 0, kv=0.7)
    env.table.observe_ttft(env.slot(SMALL[0]), "llama-8b-instruct", 50)
    env.table.observe_ttft(env.slot(SMALL[1]), "llama-8b-instruct", 900)
    assert env.endpoints(chat()) == {SMALL[0]}


def test_lora_adapter_steers_the_choice() -> None:
    env = make(NO_OVERFLOW)
    env.table.set_engine(
        env.slot(SMALL[1]),
        waiting=0,
        running=0,
        kv_usage=0.2,
        adapters=frozenset({"llama-8b-instruct"}),
        scraped_at=env.clock(),
    )
    env.engine(SMALL[0], 0, kv=0.2)
    assert env.endpoints(chat()) == {SMALL[1]}
    env.engine(SMALL[1], 0, kv=0.2)  # a later reading without the adapter: no preference
    assert env.endpoints(chat()) == set(SMALL)


def test_local_choice_fields() -> None:
    env = make(IMPLICIT)
    decision = env.route(chat("qwen"))
    local = decision.local
    assert local is not None
    assert (local.endpoint, local.slot, local.pool, local.model) == (
        BIG_ENDPOINT, env.slot(BIG_ENDPOINT), BIG, "qwen",
    )  # fmt: skip
    assert (local.prefix_blocks, local.prefix_total, local.cached_tokens) == (0, 0, 0.0)
    assert local.predicted_ttft_ms is not None and local.predicted_ttft_ms > 0


def test_picks_since_the_last_reading_count_toward_saturation() -> None:
    """Between two readings the picker's own picks fill the engines' queues: a pool read as
    free saturates once the picks since exceed the batch the engines run (here 4)."""
    env = make(NO_OVERFLOW)
    for endpoint in SMALL:
        slot = env.slot(endpoint)
        # A queue standing a second in the readings: the batch is full.
        now = env.clock()
        env.table.set_engine(slot, waiting=1, running=4, kv_usage=0.1, scraped_at=now - 1.0)
        env.table.set_engine(slot, waiting=1, running=4, kv_usage=0.1, scraped_at=now)
        env.table.set_engine(slot, waiting=0, running=4, kv_usage=0.1, scraped_at=env.clock())
    assert env.route(chat(), qos=QoS.DEFERRABLE).outcome == Outcome.OK
    for endpoint in SMALL:
        env.load(endpoint, 4)  # 4 picks since the reading: 8 on a batch of 4, 4 waiting
    assert env.route(chat(), qos=QoS.DEFERRABLE).outcome == Outcome.OK
    env.load(SMALL[0], 5)  # one more: the queue of 5 saturates it (default queue_depth)
    assert env.endpoints(chat(), qos=QoS.DEFERRABLE) == {SMALL[1]}
    env.load(SMALL[1], 5)
    assert env.route(chat(), qos=QoS.DEFERRABLE).outcome == Outcome.POLICY_REJECTED


def test_the_policy_file_sets_the_balance_rule() -> None:
    env = make(NO_OVERFLOW + "routing:\n  balance: {abs_threshold: 3, fade: true}\n")
    balance = env.router.policy.config.routing.balance
    assert (balance.abs_threshold, balance.rel_threshold, balance.fade) == (3, 1.5, True)
    assert not make(NO_OVERFLOW).router.policy.config.routing.balance.fade

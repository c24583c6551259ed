"""Router: fewest in-flight requests, ties broken at random, NO_WORKERS with a reason."""

from __future__ import annotations

import random
from collections import Counter

from kinference.config import parse_policy
from kinference.routing import Catalog, InFlight, Outcome, PoolRef, QoS, RouteQuery, Router

POLICY = parse_policy(
    """
pools:
  - namespace: default
    name: chat
    endpoints: ["10.0.0.5:8000", "10.0.0.6:8000", "10.0.0.7:8000"]
    models: ["llama"]
  - namespace: team-b
    name: big
    endpoints: ["10.0.1.5:8000"]
    models: ["llama", "qwen"]
"""
)
CHAT = PoolRef("default", "chat")
BIG = PoolRef("team-b", "big")


def router(seed: int = 0) -> tuple[Router, InFlight]:
    inflight = InFlight(ttl_s=60)
    return Router(Catalog(POLICY), inflight, random.Random(seed)), inflight


def test_query_defaults() -> None:
    query = RouteQuery("llama")
    assert (query.pool, query.qos, query.tenant) == (None, QoS.INTERACTIVE, "")


def test_least_loaded_wins() -> None:
    route, inflight = router()
    inflight.add(1, route.catalog.candidates("llama", CHAT)[0], "llama")
    inflight.add(2, route.catalog.candidates("llama", CHAT)[1], "llama")
    inflight.add(3, route.catalog.candidates("llama", BIG)[0], "llama")
    for _ in range(20):
        decision = route.route(RouteQuery("llama"))
        assert decision.outcome == Outcome.OK
        assert decision.candidate is not None
        assert decision.candidate.endpoint == "10.0.0.7:8000"
        assert decision.reason == ""


def test_ties_are_broken_at_random_and_fairly() -> None:
    route, _ = router(seed=42)
    picks: Counter[str] = Counter()
    for _ in range(4000):
        decision = route.route(RouteQuery("llama"))
        assert decision.candidate is not None
        picks[decision.candidate.endpoint] += 1
    assert set(picks) == {"10.0.0.5:8000", "10.0.0.6:8000", "10.0.0.7:8000", "10.0.1.5:8000"}
    assert all(800 < n < 1200 for n in picks.values())


def test_seeded_router_is_deterministic() -> None:
    route_a, _ = router(seed=3)
    route_b, _ = router(seed=3)
    seq_a = [route_a.route(RouteQuery("llama")).candidate for _ in range(50)]
    seq_b = [route_b.route(RouteQuery("llama")).candidate for _ in range(50)]
    assert seq_a == seq_b
    assert len(set(seq_a)) > 1


def test_load_spreads_when_picks_stay_in_flight() -> None:
    route, inflight = router(seed=1)
    for response_id in range(1, 9):
        decision = route.route(RouteQuery("llama"))
        assert decision.candidate is not None
        inflight.add(response_id, decision.candidate, "llama")
    assert sorted(inflight.per_endpoint().values()) == [2, 2, 2, 2]


def test_named_pool_restricts_the_choice() -> None:
    route, inflight = router()
    big = route.catalog.candidates("llama", BIG)[0]
    for response_id in range(10):
        inflight.add(response_id, big, "llama")  # much busier than the chat pool
    decision = route.route(RouteQuery("llama", pool=BIG))
    assert decision.candidate == big
    decision = route.route(RouteQuery("llama", pool=CHAT))
    assert decision.candidate is not None
    assert decision.candidate.pool == CHAT


def test_no_workers_with_a_reason() -> None:
    route, _ = router()
    decision = route.route(RouteQuery("gpt-9"))
    assert decision.outcome == Outcome.NO_WORKERS
    assert decision.candidate is None
    assert "gpt-9" in decision.reason
    decision = route.route(RouteQuery("qwen", pool=CHAT))
    assert decision.outcome == Outcome.NO_WORKERS
    assert "default/chat" in decision.reason


def test_outcome_values_are_metric_labels() -> None:
    assert [o.value for o in Outcome] == [
        "ok",
        "no_workers",
        "degraded",
        "bad_request",
        "policy_rejected",
    ]

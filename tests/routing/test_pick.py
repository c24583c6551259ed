"""The choice: near ties of a prefix nobody holds go to its rendezvous-hash home."""

from __future__ import annotations

import json
import random
from collections import Counter

import numpy as np

from kinference.bodies import Body
from kinference.config import parse_policy
from kinference.requests import parse_request
from kinference.routing import PrefixIndex, ProviderHealth, Router, TenantGate, WorkerTable
from kinference.routing.decision import RouteQuery
from kinference.routing.plugins.pick import HOME_BLOCKS, MaxScorePicker, home_key
from kinference.routing.policy import cooldowns_of

ENDPOINTS = [f"10.0.0.{i}:8000" for i in range(4)]


def test_a_prefix_prefers_one_home_whatever_the_order_and_the_draw() -> None:
    picker = MaxScorePicker()
    totals = np.array([1.0, 0.97, 0.95, 0.99])
    chosen = {
        ENDPOINTS[picker.pick(totals, random.Random(seed), 12345, ENDPOINTS)] for seed in range(20)
    }
    assert len(chosen) == 1
    order = [3, 1, 0, 2]
    again = picker.pick(totals[order], random.Random(99), 12345, [ENDPOINTS[i] for i in order])
    assert {ENDPOINTS[order[again]]} == chosen


def test_homes_spread_over_the_candidates() -> None:
    picker = MaxScorePicker()
    totals = np.ones(4)
    homes = Counter(picker.pick(totals, random.Random(0), key, ENDPOINTS) for key in range(400))
    assert len(homes) == 4 and min(homes.values()) > 60


def test_a_candidate_clearly_worse_is_no_home() -> None:
    picker = MaxScorePicker()
    totals = np.array([1.0, 0.5, 0.5, 0.5])
    assert all(picker.pick(totals, random.Random(0), key, ENDPOINTS) == 0 for key in range(50))


def test_without_a_home_exact_ties_are_drawn_at_random() -> None:
    picker = MaxScorePicker()
    picks = {picker.pick(np.array([1.0, 1.0, 0.97]), random.Random(s)) for s in range(40)}
    assert picks == {0, 1}  # 0.97 is no tie without a home


def test_the_home_key_names_the_leading_blocks() -> None:
    assert home_key(()) is None
    assert home_key((5, 6, 7)) == 7
    assert home_key(tuple(range(100))) == HOME_BLOCKS - 1


def router(seed: int) -> Router:
    endpoints = json.dumps(ENDPOINTS)
    policy = parse_policy(f"pools:\n  - {{name: p, endpoints: {endpoints}, models: [m]}}\n")
    return Router(
        policy, table=WorkerTable(), prefix=PrefixIndex(50_000),
        health=ProviderHealth(cooldowns_of(policy)), tenants=TenantGate(),
        rng=random.Random(seed),
    )  # fmt: skip


def question(document: int, n: int) -> RouteQuery:
    text = f"Document {document}: " + "the tide comes in and goes out. " * 200
    messages = [{"role": "system", "content": text}, {"role": "user", "content": f"q{n}"}]
    raw = json.dumps({"model": "m", "messages": messages}).encode()
    return RouteQuery(parse_request(Body([raw], reserved=len(raw))))


def test_replicas_that_share_nothing_send_a_cold_document_to_the_same_engine() -> None:
    """Two replicas without Redis (or one that learned the document was evicted
    everywhere) place the same cold document on the same engine: one copy, not two."""
    for document in range(8):
        chosen = set()
        for seed in range(4):
            local = router(seed).route(question(document, seed)).local
            assert local is not None
            chosen.add(local.endpoint)
        assert len(chosen) == 1
    homes = {router(0).route(question(d, 0)).local.endpoint for d in range(8)}  # type: ignore[union-attr]
    assert len(homes) > 1  # different documents, different homes

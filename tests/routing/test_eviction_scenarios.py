"""What the router learns when an engine had evicted a prefix the index promised: the
request prefills it again, so the engine holds it afterwards (h101: vllm-64, 4 replicas,
documents the index forgot though their engine still served them as hits)."""

from __future__ import annotations

import random

import pytest

from kinference.routing import Router
from kinference.routing.learning import Served
from loadtest.eviction_replay import LruCache
from tests.routing.plugin_helpers import pool_router, system_query

ENDPOINTS = [f"10.0.0.{i}:8000" for i in range(1, 5)]
DOCUMENT = "The tides follow the moon, and the harbour follows the tides. " * 200


def _served(router: Router, n: int, cached_tokens: int) -> str:
    """Route question `n` on the document, start it and report its final token with
    `cached_tokens`; answers the endpoint it went to."""
    local = router.route(system_query(DOCUMENT, n)).local
    assert local is not None
    router.picked(local)
    prompt = int(local.prompt_tokens)
    cached = min(cached_tokens, prompt)
    ttft_ms = 10.0 + 0.05 * (prompt - cached)  # 20k prompt tokens a second
    router.first_token(local, ttft_ms)
    router.final(local, Served(prompt, cached, (), ttft_ms, 500.0))
    return local.endpoint


def test_a_prefix_found_evicted_is_held_again_after_the_request_prefilled_it() -> None:
    """The report of a request that found its document evicted (cached 0 where the index
    said all) comes at its final token, after the request prefilled the document again:
    the engine holds it then, and the index must keep it there. Dropping it (main, h101)
    sent the next question cold, to another engine or home with nothing predicted cached."""
    router = pool_router(ENDPOINTS, 50.0)
    holder = _served(router, 0, 0)  # first sight: the document prefilled there
    assert _served(router, 1, 1 << 30) == holder  # a hit: the index holds it on `holder`
    assert _served(router, 2, 0) == holder  # the engine had evicted it: prefilled again
    query = system_query(DOCUMENT, 3)
    held = router.prefix.match(router.route(query).prefix_hashes)
    assert set(held) == {router.table.slot(holder)}
    assert router.route(query).local.endpoint == holder  # type: ignore[union-attr]


@pytest.mark.parametrize("seed", range(6))
def test_a_worker_that_evicts_gets_a_capacity_estimate_near_its_own_within_reports(
    seed: int,
) -> None:
    """Documents in a random order on one worker whose cache holds ~2.5 of them: each
    report that falls short (a document evicted since) bounds its capacity by the age of
    the first block it lost, at once; within eight such reports the estimate is within a
    document of the real one, never below (h101: a tenth a report from 50,000, it stayed
    > 40,000 while the engine held 1,536 blocks; the deepest block's age, 4 documents)."""
    endpoint = ENDPOINTS[0]
    router = pool_router([endpoint], 50.0)
    documents = [f"Document {d}. " + DOCUMENT for d in range(6)]
    rng = random.Random(seed)
    engine: LruCache | None = None
    shortfalls = 0
    for n in range(100):
        local = router.route(system_query(rng.choice(documents), n)).local
        assert local is not None and local.endpoint == endpoint
        if engine is None:  # ~2.5 documents' blocks
            engine = LruCache(capacity=len(local.hashes) * 5 // 2)
        router.picked(local)
        prompt = int(local.prompt_tokens)
        cached = prompt * engine.serve(local.hashes) // len(local.hashes)
        shortfalls += local.cached_tokens > cached + prompt // 2
        router.first_token(local, 10.0 + 0.05 * (prompt - cached))
        router.final(local, Served(prompt, cached, (), 10.0, 500.0))
        if shortfalls >= 8:
            break
    assert engine is not None and shortfalls >= 8
    estimate = router.prefix.capacity[router.table.slot(endpoint)]
    document = len(local.hashes)
    assert engine.capacity <= estimate <= engine.capacity + document

"""What the router learns when an engine had evicted a prefix the index promised: the
request prefills it again, so the engine holds it afterwards (h101: vllm-64, 4 replicas,
documents the index forgot though their engine still served them as hits)."""

from __future__ import annotations

import random

import pytest

from kinference.routing import Router
from kinference.routing.decision import RouteQuery
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


def test_two_documents_a_worker_cannot_hold_together_stop_being_predicted_there() -> None:
    """h148's mixed seed-2 thrash, h150: two documents whose questions all go to one worker
    whose cache (its published size: 2.5 documents here) cannot hold both beside what its
    requests add; each question records its document again. A question found its document
    evicted (cached 0): the worker kept fewer blocks than the other document and what came
    since. Its capacity estimate must drop below the two documents, so that the index
    stops predicting both there. On main every question on the other document aged it by a
    whole document (blocks recorded since, not distinct ones): the lost block's age read
    five documents, the estimate stayed at the engine's size and the index kept promising
    both (h148: 8 questions sent cold to the worker the index said held them, ~650 ms)."""
    endpoint = ENDPOINTS[0]
    router = pool_router([endpoint], 50.0)
    a, b = (f"Document {name}. " + DOCUMENT for name in "AB")
    slot = router.table.slot(endpoint)
    both = [router.route(_question(text, 99)).prefix_hashes for text in (a, b)]
    other = router.route(_question(a, 98)).prefix_hashes
    document = next(i for i, (x, y) in enumerate(zip(both[0], other, strict=False)) if x != y)
    router.prefix.report(slot, document * 5 // 2)  # the engine's published size
    for n, (text, cached) in enumerate(((a, 0), (b, 0), (b, 1 << 30), (b, 1 << 30))):
        assert _asked(router, text, n, cached) == endpoint
    assert all(router.prefix.match(hashes).get(slot) for hashes in both)  # both predicted
    assert _asked(router, a, 9, 0) == endpoint  # A again: the engine had evicted it
    held = [router.prefix.match(hashes).get(slot, 0) for hashes in both]
    assert held[0] >= document - 2  # A prefilled again: held
    assert held[1] < document // 2  # B no longer predicted there beside it
    assert router.prefix.capacity[slot] < 2 * document


def _asked(router: Router, text: str, n: int, cached_tokens: int) -> str:
    """`_served` for question `n` on `text`."""
    local = router.route(_question(text, n)).local
    assert local is not None
    router.picked(local)
    prompt = int(local.prompt_tokens)
    cached = min(cached_tokens, prompt)
    ttft_ms = 10.0 + 0.05 * (prompt - cached)
    router.first_token(local, ttft_ms)
    router.final(local, Served(prompt, cached, (), ttft_ms, 500.0))
    return local.endpoint


def _question(document: str, n: int) -> RouteQuery:
    """Question `n` on `document`: a few blocks of its own after it, as the benchmark's."""
    return system_query(document + f" Question {n}: " + "why is that so? " * 12, n)

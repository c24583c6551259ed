"""Before any final report: a shared prompt cached on an engine prefilling a long document
(the real Router and reports; engines prefilling at 20k tokens/s, twice the prior). h36's
vllm-64 12 req/s p90: the document's rest priced at the prior's rate made the hit look
slower than a cold prefill elsewhere; the engine's first tokens tell its speed."""

from __future__ import annotations

import json
import random

from kinference.bodies import Body
from kinference.config import parse_policy
from kinference.requests import parse_request
from kinference.routing import (
    InFlight,
    PrefixIndex,
    ProviderHealth,
    RouteQuery,
    Router,
    TenantGate,
    WorkerTable,
)
from kinference.routing.decision import LocalChoice
from kinference.routing.policy import cooldowns_of

MS_PER_TOKEN = 0.05  # the engines' real speed: 20k tokens/s
FIXED_MS = 10.0


class Clock:
    def __init__(self) -> None:
        self.ms = 0.0

    def __call__(self) -> float:
        return self.ms / 1000.0


def cluster(clock: Clock) -> tuple[Router, InFlight]:
    names = [f"10.0.0.{i}:8000" for i in range(1, 5)]
    policy = parse_policy(
        "pools:\n  - {name: p, engine: vllm, endpoints: " + json.dumps(names) + ", models: [m]}\n"
    )
    router = Router(
        policy, table=WorkerTable(clock=clock), prefix=PrefixIndex(50_000),
        health=ProviderHealth(cooldowns_of(policy)), tenants=TenantGate(),
        rng=random.Random(7), clock=clock,
    )  # fmt: skip
    return router, InFlight(router.table, 3600.0)


def query(system: str, question: str) -> RouteQuery:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    raw = json.dumps({"model": "m", "messages": messages}).encode()
    return RouteQuery(parse_request(Body([raw], reserved=len(raw))))


def pick(router: Router, inflight: InFlight, rid: int, request: RouteQuery) -> LocalChoice:
    local = router.route(request).local
    assert local is not None
    inflight.add(rid, local, "", local.hashes)
    router.picked(local)
    return local


def prefill_ms(local: LocalChoice) -> float:
    return FIXED_MS + local.uncached_tokens * MS_PER_TOKEN


def test_a_shared_prompt_stays_on_the_engine_about_to_finish_a_document() -> None:
    clock = Clock()
    router, inflight = cluster(clock)
    systems = [f"system prompt {i}: " + f"rule {i} of the house style. " * 200 for i in range(4)]
    homes = {}
    for i, system in enumerate(systems):  # one cold prompt per engine, 1.6k tokens each
        clock.ms = 100.0 * i
        local = pick(router, inflight, i, query(system, "first question"))
        homes[local.endpoint] = system
        clock.ms += prefill_ms(local)
        router.first_token(local, prefill_ms(local))  # replies still decoding: no final
    assert len(homes) == 4, homes
    clock.ms = 1000.0
    document = "the annual report of the cooperative, page by page. " * 900  # ~12k tokens
    doc = pick(router, inflight, 10, query(document, "summarise it"))
    clock.ms += 0.9 * prefill_ms(doc)  # the engine has computed nine tenths of it
    hit = pick(router, inflight, 11, query(homes[doc.endpoint], "second question"))
    assert hit.endpoint == doc.endpoint, (hit.predicted_ttft_ms, hit.cached_tokens)
    assert hit.cached_tokens > 1000.0

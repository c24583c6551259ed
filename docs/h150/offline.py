"""Offline: 2 documents (~12k tokens each), questions in random order, a pool of 2 workers whose
engines are loadtest.engine_model.EngineModel (1536 blocks of 64 chars, LRU head first, completions
cached), served one at a time; the first two questions are pinned to worker 0 (h148's start).
Counts questions predicted cached (>= half) but reported 0."""

import random, sys
from kinference.routing.learning import Served
from loadtest.engine_model import EngineModel
from tests.routing.plugin_helpers import pool_router, system_query

EPS = ["10.0.0.1:8000", "10.0.0.2:8000"]


def run(seed):
    rng = random.Random(seed)
    router = pool_router(EPS, 50.0)
    docs = [
        f"Document {d}. "
        + " ".join(
            rng.choice(["tide", "moon", "harbour", "ship", "sail", "rope"]) for _ in range(9700)
        )
        for d in range(2)
    ]
    engines = {ep: EngineModel(1536, 64, seed) for ep in EPS}
    for ep in EPS:
        router.prefix.report(router.table.slot(ep), 1536)
    bad = cold = 0
    for n in range(60):
        d = n if n < 2 else rng.randrange(2)
        text = docs[d] + f"q{n} " + "why? " * rng.randrange(10, 40)
        q = system_query(text, n)
        router.table.set_ready(router.table.slot(EPS[1]), n >= 2)  # the first two on worker 0
        local = router.route(q).local
        eng = engines[local.endpoint]
        router.picked(local)
        adm = eng.admit(text, "answer " * 40)
        prompt = int(local.prompt_tokens)
        cached = min(adm.cached_tokens, prompt)
        if local.cached_tokens >= prompt / 2 and cached == 0:
            bad += 1
        cold += cached == 0
        ttft_ms = 10 + 0.05 * (prompt - cached)
        router.first_token(local, ttft_ms)
        router.final(local, Served(prompt, cached, (), ttft_ms, 500.0))
    return bad, cold


print([run(s) for s in range(6)])

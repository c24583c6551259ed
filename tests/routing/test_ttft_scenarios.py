"""The TTFT model against a small simulated cluster (the real Router, InFlight and
reports; engines as a discrete-event queue): cold prompts spread, and a worker twice as
slow to prefill gets proportionally fewer requests once load makes it worth using."""

from __future__ import annotations

import heapq
import json
import random
from collections import Counter
from dataclasses import dataclass, field

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
from kinference.routing.learning import Served
from kinference.routing.policy import cooldowns_of

BATCH = 8  # the engines' batch, as the TTFT model's prior assumes


@dataclass
class Engine:
    ms_per_token: float
    running: int = 0
    queue: list[int] = field(default_factory=list)


@dataclass
class Sim:
    router: Router
    inflight: InFlight
    engines: dict[str, Engine]
    events: list[tuple[float, int, str, int]] = field(default_factory=list)
    arrivals: dict[int, float] = field(default_factory=dict)
    tokens: dict[int, int] = field(default_factory=dict)
    served: Counter[str] = field(default_factory=Counter)
    seq: int = 0

    def push(self, at: float, kind: str, rid: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, self.seq, kind, rid))


def cluster(speeds: dict[str, float]) -> Sim:
    endpoints = json.dumps(list(speeds))
    policy = parse_policy(f"pools:\n  - {{name: p, endpoints: {endpoints}, models: [m]}}\n")
    table = WorkerTable()
    health = ProviderHealth(cooldowns_of(policy))
    router = Router(
        policy, table=table, prefix=PrefixIndex(50_000), health=health,
        tenants=TenantGate(), rng=random.Random(7),
    )  # fmt: skip
    engines = {endpoint: Engine(ms) for endpoint, ms in speeds.items()}
    return Sim(router, InFlight(table, 3600.0), engines)


def chat(text: str) -> RouteQuery:
    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]}).encode()
    return RouteQuery(parse_request(Body([raw], reserved=len(raw))))


def run(sim: Sim, arrivals_ms: list[float], service_ms: float, chars: int) -> Counter[str]:
    picks: Counter[str] = Counter()
    for rid, at in enumerate(arrivals_ms, start=1):
        sim.push(at, "arrive", rid)
    while sim.events:
        now, _, kind, rid = heapq.heappop(sim.events)
        if kind == "arrive":
            text = f"{rid:06d} " + "lorem ipsum dolor sit amet " * (chars // 27)
            decision = sim.router.route(chat(text))
            local = decision.local
            assert local is not None
            sim.inflight.add(rid, local, "", local.hashes)
            sim.router.picked(local)
            sim.arrivals[rid], sim.tokens[rid] = now, int(local.prompt_tokens)
            picks[local.endpoint] += 1
            _admit(sim, local.endpoint, rid, now)
        elif kind == "first":
            assignment = sim.inflight.get(rid)
            assert assignment is not None and assignment.local is not None
            assignment.first_token_at, assignment.ttft_ms = now, now - sim.arrivals[rid]
            sim.router.first_token(assignment.local, now - sim.arrivals[rid])
            sim.push(now + service_ms, "done", rid)
        else:
            assignment = sim.inflight.release(rid)
            assert assignment is not None and assignment.local is not None
            endpoint = assignment.local.endpoint
            sim.router.final(assignment.local, Served(sim.tokens[rid], 0, (),
                             assignment.ttft_ms, service_ms))  # fmt: skip
            engine = sim.engines[endpoint]
            engine.running -= 1
            if engine.queue:
                _admit(sim, endpoint, engine.queue.pop(0), now)
    return picks


def _admit(sim: Sim, endpoint: str, rid: int, now: float) -> None:
    engine = sim.engines[endpoint]
    if engine.running >= BATCH:
        engine.queue.append(rid)
        return
    engine.running += 1
    sim.push(now + 10 + sim.tokens[rid] * engine.ms_per_token, "first", rid)


def test_cold_prompts_spread_over_idle_workers() -> None:
    """A few distinct prompts at a low rate, each finished before the next: every idle
    worker ties and the tie-break spreads them, rather than following the last winner."""
    sim = cluster({"a:1": 0.05, "b:1": 0.05, "c:1": 0.05})
    picks = run(sim, [i * 2000.0 for i in range(30)], service_ms=200, chars=4000)
    assert len(picks) == 3, picks
    assert max(picks.values()) <= 18, picks


def test_twice_the_prefill_time_gets_proportionally_fewer_requests() -> None:
    sim = cluster({"fast:1": 0.05, "slow:1": 0.10})
    rng = random.Random(3)
    at, arrivals = 0.0, []
    for _ in range(600):  # ~30 requests/s for 20 s: more than the fast worker alone holds
        at += rng.expovariate(1 / 33.0)
        arrivals.append(at)
    picks = run(sim, arrivals, service_ms=200, chars=16_000)
    fast, slow = picks["fast:1"], picks["slow:1"]
    assert slow >= 0.15 * len(arrivals), picks  # the slow worker is used under load ...
    assert fast >= 1.3 * slow, picks  # ... but the fast one takes clearly more
    rates = sim.router.learning.rates
    learned = {ep: rates.learned("m", "prefill_ms_per_token", sim.router.table.slot(ep))
               for ep in ("fast:1", "slow:1")}  # fmt: skip
    assert learned["slow:1"] > 1.5 * learned["fast:1"], learned

"""CPU per Router.route with the shipped defaults (docs/h198/PLAN.txt).

    PYTHONPATH=<tree> python docs/h198/route_ab.py [ROUTES]

Prints one line: microseconds of process CPU time per route (picked and released each).
"""

from __future__ import annotations

import json
import random
import sys
import time

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
from kinference.routing.policy import cooldowns_of

POLICY = """
pools:
  - {name: chat, endpoints: ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000",
                             "10.0.0.4:8000"], models: [m]}
"""
SYSTEM = "You are a careful assistant who answers in plain words. " * 30


def requests() -> list[object]:
    made = []
    for n in range(8):
        messages = [{"role": "user", "content": f"question {n}: " + "why is the sky blue? " * 20}]
        if n % 2 == 0:
            messages.insert(0, {"role": "system", "content": SYSTEM})
        raw = json.dumps({"model": "m", "messages": messages}).encode()
        made.append(parse_request(Body([raw], reserved=len(raw))))
    return made


def main(routes: int) -> None:
    policy = parse_policy(POLICY)
    table = WorkerTable()
    router = Router(
        policy, table=table, prefix=PrefixIndex(policy.routing.prefix.lru_blocks_per_worker),
        health=ProviderHealth(cooldowns_of(policy)), tenants=TenantGate(),
        rng=random.Random(0),
    )  # fmt: skip
    inflight = InFlight(table, 900.0)
    queries = [RouteQuery(request) for request in requests()]  # type: ignore[arg-type]
    rng = random.Random(1)
    spent = 0.0
    for n in range(routes + 2000):  # the first 2000: warm-up
        query = queries[rng.randrange(len(queries))]
        started = time.process_time()
        decision = router.route(query)
        took = time.process_time() - started
        if n >= 2000:
            spent += took
        local = decision.local
        assert local is not None
        inflight.add(n, local, "")
        router.picked(local)
        router.flush_prefix_records()
        if n >= 6:
            inflight.release(n - 6)  # about 6 in flight
    print(f"{spent / routes * 1e6:.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)

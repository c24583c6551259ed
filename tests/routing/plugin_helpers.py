"""A PickContext over a real worker table, for the plugin tests."""

from __future__ import annotations

import json
import random

import numpy as np

from kinference.bodies import Body
from kinference.config import parse_policy
from kinference.requests import InferenceRequest, parse_request
from kinference.routing import PrefixIndex, ProviderHealth, Router, TenantGate
from kinference.routing.decision import RouteQuery
from kinference.routing.features import Signals
from kinference.routing.plugins.base import PickContext
from kinference.routing.policy import cooldowns_of
from kinference.routing.table import WorkerTable

MODEL = "m"


def request(content: str = "hello") -> InferenceRequest:
    data = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": content}]})
    raw = data.encode()
    return parse_request(Body([raw], reserved=len(raw)))


def pool_router(endpoints: list[str], now: float) -> Router:
    """A Router over one pool `p` of `endpoints` serving model `m`, its clock at `now`."""
    policy = parse_policy(
        f"pools:\n  - {{name: p, endpoints: {json.dumps(endpoints)}, models: [m]}}\n"
    )
    return Router(
        policy, table=WorkerTable(), prefix=PrefixIndex(50_000),
        health=ProviderHealth(cooldowns_of(policy)), tenants=TenantGate(),
        rng=random.Random(0), clock=lambda: now,
    )  # fmt: skip


def system_query(system: str, n: int) -> RouteQuery:
    """A chat of model `m`: `system` as its system prompt, then the question `q{n}`."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": f"q{n}"}]
    raw = json.dumps({"model": MODEL, "messages": messages}).encode()
    return RouteQuery(parse_request(Body([raw], reserved=len(raw))))


def context(
    workers: int,
    *,
    prompt_tokens: float = 1000.0,
    cached: list[float] | None = None,
    table: WorkerTable | None = None,
) -> PickContext:
    table = WorkerTable() if table is None else table
    slots = table.slots(f"10.0.0.{i}:8000" for i in range(workers))
    size = len(table.inflight)
    waiting, kv = table.engine_signals(0.0, 0.0) if not table.has_readings() else (
        table.waiting.copy(), table.kv_usage.copy()
    )  # fmt: skip
    known = table.has_readings()
    signals = Signals(waiting[:size], kv[:size], known=known)
    return PickContext(
        request(),
        MODEL,
        "default/pool",
        table,
        signals,
        slots,
        prompt_tokens,
        np.asarray(cached if cached is not None else [0.0] * workers, dtype=np.float64),
    )

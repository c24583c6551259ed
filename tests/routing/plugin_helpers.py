"""A PickContext over a real worker table, for the plugin tests."""

from __future__ import annotations

import json

import numpy as np

from kinference.bodies import Body
from kinference.requests import InferenceRequest, parse_request
from kinference.routing.features import Signals
from kinference.routing.plugins.base import PickContext
from kinference.routing.table import WorkerTable

MODEL = "m"


def request(content: str = "hello") -> InferenceRequest:
    data = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": content}]})
    raw = data.encode()
    return parse_request(Body([raw], reserved=len(raw)))


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

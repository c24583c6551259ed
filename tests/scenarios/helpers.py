"""Scenario helpers: a real picker, real client, and fake engines serving /metrics.

Each scenario writes its own YAML policy (validated by `kinference.config.parse_policy`),
with pools whose endpoints are fake engines on free loopback ports (`engine: vllm`), and
scrapes them on short intervals. Every wait polls against a deadline; nothing sleeps a fixed
time to let a state settle.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kinference.config import parse_policy
from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import SETTLE_S, push, wait_until
from tests.conftest import PickerFactory, RunningPicker
from tests.workers.fake_engine import FakeEngine, Mode
from tests.workers.pages import vllm_text

# Fast scrapes: a change on a fake engine reaches the routing table within a few intervals.
# The timeout is above the interval so a loaded test machine does not fail scrapes (and
# make workers not ready) by accident; scrapes of one endpoint never overlap anyway.
ENGINE_METRICS = (
    "{interval_s: 0.05, timeout_s: 0.25, stale_after_s: 0.5, failures_before_unready: 3}"
)
IDLE_KV = 0.1  # KV-cache use of an idle fake engine

OK = pb.PickResponse.OK
NO_WORKERS = pb.PickResponse.NO_WORKERS
DEGRADED = pb.PickResponse.DEGRADED
BAD_REQUEST = pb.PickResponse.BAD_REQUEST
POLICY_REJECTED = pb.PickResponse.POLICY_REJECTED
INTERACTIVE = pb.PickRequest.INTERACTIVE
BATCH = pb.PickRequest.BATCH
DEFERRABLE = pb.PickRequest.DEFERRABLE


def outcome_name(pick: pb.PickResponse) -> str:
    return pb.PickResponse.Outcome.Name(pick.outcome)


# --- fake engines -------------------------------------------------------------------------


@dataclass
class Engines:
    """Fake vLLM engines; `set` changes what one reports from its next scrape on."""

    engines: list[FakeEngine]

    @property
    def endpoints(self) -> list[str]:
        return [engine.endpoint for engine in self.engines]

    def __getitem__(self, index: int) -> FakeEngine:
        return self.engines[index]

    def set(
        self, index: int, *, waiting: float = 0, running: float = 0, kv: float = IDLE_KV
    ) -> None:
        engine = self.engines[index]
        engine.text = vllm_text(waiting, running, kv)
        engine.mode = Mode.OK

    def set_all(self, *, waiting: float = 0, running: float = 0, kv: float = IDLE_KV) -> None:
        for index in range(len(self.engines)):
            self.set(index, waiting=waiting, running=running, kv=kv)


EnginesFactory = Callable[[int], Awaitable[Engines]]


# --- policies -----------------------------------------------------------------------------


def endpoints_yaml(endpoints: Sequence[str]) -> str:
    return json.dumps(list(endpoints))


def vllm_pool(
    name: str, endpoints: Sequence[str], models: Sequence[str], ns: str = "default"
) -> str:
    """One `pools:` list item (YAML flow mapping) for fake vLLM engines."""
    return (
        f"  - {{namespace: {ns}, name: {name}, engine: vllm, "
        f"endpoints: {endpoints_yaml(endpoints)}, models: {json.dumps(list(models))}}}\n"
    )


def routing_yaml(**sections: str) -> str:
    """A `routing:` section: the fast engine-metrics settings (unless given) and the rest."""
    sections.setdefault("engine_metrics", ENGINE_METRICS)
    lines = ["routing:", *(f"  {key}: {value}" for key, value in sections.items())]
    return "\n".join(lines) + "\n"


async def start_with(
    start_picker: PickerFactory, policy_yaml: str, **settings: Any
) -> RunningPicker:
    return await start_picker(policy=parse_policy(policy_yaml, "<scenario>"), **settings)


# --- waiting for scrapes ------------------------------------------------------------------


def _same(value: float, wanted: float | None) -> bool:
    if wanted is None:
        return math.isnan(value)
    return not math.isnan(value) and math.isclose(value, wanted)


async def wait_engine(
    picker: RunningPicker,
    endpoint: str,
    *,
    waiting: float | None = 0,
    kv: float | None = IDLE_KV,
    ready: bool = True,
    within_s: float = SETTLE_S,
) -> None:
    """Wait until the router sees what the endpoint's engine reports (None: unknown): the
    table's readings as the router reads them, aged out after `stale_after_s`."""
    table, router = picker.app.table, picker.app.router
    slot = table.slot(endpoint)

    def shown() -> bool:
        seen_waiting, seen_kv = table.engine_signals(
            time.monotonic(), router.policy.engine_stale_after_s
        )
        return (
            _same(float(seen_waiting[slot]), waiting)
            and _same(float(seen_kv[slot]), kv)
            and bool(table.ready[slot]) is ready
        )

    what = f"{endpoint} scraped as waiting={waiting} kv={kv} ready={ready}"
    await wait_until(shown, within_s, what)


async def wait_reading_after(
    picker: RunningPicker, endpoint: str, monotonic_s: float, within_s: float = SETTLE_S
) -> None:
    """Wait for a reading of the endpoint's engine taken after `monotonic_s`."""
    table = picker.app.table
    slot = table.slot(endpoint)
    await wait_until(
        lambda: float(table.scraped_at[slot]) > monotonic_s, within_s, f"a reading of {endpoint}"
    )


async def wait_engines(picker: RunningPicker, endpoints: Sequence[str], **expected: Any) -> None:
    for endpoint in endpoints:
        await wait_engine(picker, endpoint, **expected)


# --- bodies and calls ---------------------------------------------------------------------


def chat(model: str, user: str, system: str | None = None, **extra: Any) -> bytes:
    messages = [] if system is None else [{"role": "system", "content": system}]
    messages.append({"role": "user", "content": user})
    return json.dumps({"model": model, "messages": messages, **extra}).encode()


def system_prompt(topic: str, chars: int = 4000) -> str:
    """A long system prompt, distinct per topic from its first characters on."""
    text = f"[{topic}] You are a careful assistant for {topic}. "
    filler = f"Follow the {topic} handbook, section by section, and cite it. "
    return (text + filler * (chars // len(filler) + 1))[:chars]


async def pick(
    picker: RunningPicker,
    body: bytes,
    *,
    tenant: str = "",
    qos: int = INTERACTIVE,
    pool: tuple[str, str] | None = None,
) -> pb.PickResponse:
    pushed = await push(picker, body)
    return await picker.client.pick(pushed.stream_id, tenant=tenant, qos=qos, pool=pool)


async def pick_ok(picker: RunningPicker, body: bytes, **kwargs: Any) -> pb.PickResponse:
    result = await pick(picker, body, **kwargs)
    assert result.outcome == OK, f"{outcome_name(result)}: {result.reason}"
    return result


async def finish(picker: RunningPicker, result: pb.PickResponse, **tokens: int) -> bytes:
    """Pull the body and report the end of the response, as a proxy does; returns the body."""
    body = await picker.client.pull_all(result.response_id)
    ack = await picker.client.final_token(result.response_id, **tokens)
    assert ack.acknowledged
    return body


def where(result: pb.PickResponse) -> str:
    """The endpoint, or `provider:<namespace/name><path>`, or the outcome when not placed."""
    kind = result.WhichOneof("destination")
    if kind == "local":
        return result.local.endpoint
    if kind == "provider":
        ref = result.provider.backend_ref
        return f"provider:{ref.namespace}/{ref.name}{result.provider.path}"
    return f"<{outcome_name(result)}: {result.reason}>"

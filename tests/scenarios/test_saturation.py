"""Saturation from scraped queue depth and KV use: QoS shedding and overflow to a provider."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import PickerFactory, RunningPicker
from tests.scenarios.helpers import (
    BATCH,
    DEFERRABLE,
    INTERACTIVE,
    NO_WORKERS,
    OK,
    POLICY_REJECTED,
    Engines,
    EnginesFactory,
    chat,
    finish,
    outcome_name,
    pick,
    routing_yaml,
    start_with,
    vllm_pool,
    wait_engine,
    wait_engines,
    wait_reading_after,
    where,
)
from tests.workers.fake_engine import Mode

LOCAL = "llama-8b-instruct"  # served by the pool only: no overflow target
ROUTED = "llama"  # the pool first, a provider as overflow
OVERFLOW_MODEL = "gpt-4o-mini"
QUEUE_DEPTH = 5
KV_CACHE = 0.8
QOS = {"INTERACTIVE": INTERACTIVE, "BATCH": BATCH, "DEFERRABLE": DEFERRABLE}

# (waiting, kv) readings per level: saturated, and overloaded (twice the queue, or KV halfway
# from the threshold to full).
SATURATED = {"queue": (QUEUE_DEPTH, 0.1), "kv": (0, KV_CACHE)}
OVERLOADED = {"queue": (2 * QUEUE_DEPTH, 0.1), "kv": (0, 0.95)}


def _policy(engines: Engines) -> str:
    return (
        "pools:\n"
        + vllm_pool("chat", engines.endpoints, [LOCAL])
        + "providers:\n  - {namespace: ai, name: openai, api: openai}\n"
        + "models:\n"
        + f"  - name: {ROUTED}\n"
        + "    targets:\n"
        + f"      - {{pool: default/chat, model: {LOCAL}}}\n"
        + f"      - {{provider: ai/openai, model: {OVERFLOW_MODEL}, use: overflow}}\n"
        + routing_yaml(saturation=f"{{queue_depth: {QUEUE_DEPTH}, kv_cache: {KV_CACHE}}}")
    )


async def _cluster(
    start_engines: EnginesFactory, start_picker: PickerFactory
) -> tuple[Engines, RunningPicker]:
    engines = await start_engines(2)
    picker = await start_with(start_picker, _policy(engines))
    await wait_engines(picker, engines.endpoints)
    return engines, picker


async def _report(engines: Engines, picker: RunningPicker, waiting: float, kv: float) -> None:
    engines.set_all(waiting=waiting, kv=kv)
    await wait_engines(picker, engines.endpoints, waiting=waiting, kv=kv)


async def _outcomes(picker: RunningPicker, model: str) -> dict[str, str]:
    """Where each QoS class's pick of `model` goes (picks finished at once)."""
    found = {}
    for name, qos in QOS.items():
        # A reading taken while an earlier pick was in flight makes its completion count as
        # a slot freed since (one less in the queue than the engine reports, so no longer
        # saturated): each pick waits for readings taken after the last one finished.
        finished = time.monotonic()
        for endpoint in picker.app.engines.scraper.endpoints:
            await wait_reading_after(picker, endpoint, finished)
        result = await pick(picker, chat(model, f"{name} work"), qos=qos)
        if result.outcome == POLICY_REJECTED:
            assert "saturated" in result.reason, result.reason
            assert "default/chat" in result.reason, result.reason
            found[name] = "rejected"
            continue
        assert result.outcome == OK, f"{outcome_name(result)}: {result.reason}"
        body = json.loads(await finish(picker, result))
        kind = result.WhichOneof("destination")
        if kind == "provider":
            assert result.provider.backend_ref.namespace == "ai"
            assert result.provider.backend_ref.name == "openai"
            assert result.provider.path == "/v1/chat/completions"
            assert body["model"] == OVERFLOW_MODEL
            found[name] = "provider"
        else:
            assert result.local.endpoint in picker.app.engines.scraper.endpoints
            assert body["model"] == LOCAL
            found[name] = "local"
        assert result.requested_model == model
    return found


@pytest.mark.parametrize("signal", ["queue", "kv"])
async def test_saturated_pool_sheds_deferrable_then_batch(
    start_engines: EnginesFactory, start_picker: PickerFactory, signal: str
) -> None:
    engines, picker = await _cluster(start_engines, start_picker)
    free = {"INTERACTIVE": "local", "BATCH": "local", "DEFERRABLE": "local"}
    assert await _outcomes(picker, LOCAL) == free
    assert await _outcomes(picker, ROUTED) == free

    await _report(engines, picker, *SATURATED[signal])
    assert await _outcomes(picker, LOCAL) == {
        "INTERACTIVE": "local",  # never shed, and nowhere else to go
        "BATCH": "local",
        "DEFERRABLE": "rejected",
    }
    assert await _outcomes(picker, ROUTED) == {
        "INTERACTIVE": "provider",  # overflows
        "BATCH": "local",
        "DEFERRABLE": "rejected",
    }

    await _report(engines, picker, *OVERLOADED[signal])
    assert await _outcomes(picker, LOCAL) == {
        "INTERACTIVE": "local",
        "BATCH": "rejected",
        "DEFERRABLE": "rejected",
    }
    assert await _outcomes(picker, ROUTED) == {
        "INTERACTIVE": "provider",
        "BATCH": "rejected",
        "DEFERRABLE": "rejected",
    }

    await _report(engines, picker, 0, 0.1)
    assert await _outcomes(picker, ROUTED) == free


async def test_one_free_worker_takes_every_class(
    start_engines: EnginesFactory, start_picker: PickerFactory
) -> None:
    engines, picker = await _cluster(start_engines, start_picker)
    engines.set(0, waiting=2 * QUEUE_DEPTH)
    await wait_engine(picker, engines.endpoints[0], waiting=2 * QUEUE_DEPTH)
    for model in (LOCAL, ROUTED):
        for qos in QOS.values():
            result = await pick(picker, chat(model, "work"), qos=qos)
            assert where(result) == engines.endpoints[1]
            await finish(picker, result)


async def test_batch_joins_a_saturated_worker_that_is_not_overloaded(
    start_engines: EnginesFactory, start_picker: PickerFactory
) -> None:
    engines, picker = await _cluster(start_engines, start_picker)
    engines.set(0, waiting=2 * QUEUE_DEPTH)  # overloaded
    engines.set(1, waiting=QUEUE_DEPTH)  # saturated only
    await wait_engine(picker, engines.endpoints[0], waiting=2 * QUEUE_DEPTH)
    await wait_engine(picker, engines.endpoints[1], waiting=QUEUE_DEPTH)
    for i in range(10):
        result = await pick(picker, chat(ROUTED, f"batch {i}"), qos=BATCH)
        assert where(result) == engines.endpoints[1]
        # Finished at once: picks still in flight would add to the queue the picker carries
        # forward between readings (5 more would overload this one too).
        await finish(picker, result)
    # A reading taken while one of them was in flight makes its completion count as a slot
    # freed since (the real engine's queue would have held it): wait for one taken after.
    await wait_reading_after(picker, engines.endpoints[1], time.monotonic())
    deferred = await pick(picker, chat(ROUTED, "later"), qos=DEFERRABLE)
    assert deferred.outcome == POLICY_REJECTED
    assert "saturated" in deferred.reason


async def test_with_no_ready_worker_every_class_overflows(
    start_engines: EnginesFactory, start_picker: PickerFactory
) -> None:
    engines, picker = await _cluster(start_engines, start_picker)
    for engine in engines.engines:
        engine.mode = Mode.FAIL
    await wait_engines(picker, engines.endpoints, waiting=None, kv=None, ready=False)
    for name, qos in QOS.items():
        result = await pick(picker, chat(ROUTED, f"{name} work"), qos=qos)
        assert where(result) == "provider:ai/openai/v1/chat/completions", name
        only_local = await pick(picker, chat(LOCAL, f"{name} work"), qos=qos)
        assert only_local.outcome == NO_WORKERS, where(only_local)
        assert "no ready endpoint" in only_local.reason


async def test_interactive_falls_back_to_a_busy_worker_when_the_overflow_is_cooling(
    start_engines: EnginesFactory, start_picker: PickerFactory
) -> None:
    engines, picker = await _cluster(start_engines, start_picker)
    await _report(engines, picker, *OVERLOADED["queue"])
    picker.app.router.health.report("ai/openai", "rate_limited", "test")
    result = await pick(picker, chat(ROUTED, "urgent"), qos=INTERACTIVE)
    assert where(result) in engines.endpoints  # never shed
    batch = await pick(picker, chat(ROUTED, "batch"), qos=BATCH)
    assert batch.outcome == POLICY_REJECTED
    picker.app.router.health.clear("ai/openai")
    result = await pick(picker, chat(ROUTED, "urgent"), qos=INTERACTIVE)
    assert where(result) == "provider:ai/openai/v1/chat/completions"


async def test_batch_uses_a_later_primary_pool_that_is_only_saturated(
    start_engines: EnginesFactory, start_picker: PickerFactory
) -> None:
    first, second = await start_engines(1), await start_engines(1)
    policy = (
        "pools:\n"
        + vllm_pool("east", first.endpoints, [LOCAL])
        + vllm_pool("west", second.endpoints, [LOCAL])
        + "models:\n"
        + f"  - name: {ROUTED}\n"
        + "    targets:\n"
        + f"      - {{pool: default/east, model: {LOCAL}}}\n"
        + f"      - {{pool: default/west, model: {LOCAL}}}\n"
        + routing_yaml(saturation=f"{{queue_depth: {QUEUE_DEPTH}, kv_cache: {KV_CACHE}}}")
    )
    picker = await start_with(start_picker, policy)
    first.set(0, waiting=2 * QUEUE_DEPTH)  # overloaded
    second.set(0, waiting=QUEUE_DEPTH)  # saturated only
    await wait_engine(picker, first.endpoints[0], waiting=2 * QUEUE_DEPTH)
    await wait_engine(picker, second.endpoints[0], waiting=QUEUE_DEPTH)
    result = await pick(picker, chat(ROUTED, "batch work"), qos=BATCH)
    assert where(result) == second.endpoints[0]

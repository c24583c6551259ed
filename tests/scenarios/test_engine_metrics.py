"""Engine metrics scraped from fake vLLM engines steer picks: queue, KV cache, readiness."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.api.helpers import wait_until
from tests.conftest import PickerFactory, RunningPicker
from tests.scenarios.helpers import (
    DEFERRABLE,
    IDLE_KV,
    NO_WORKERS,
    POLICY_REJECTED,
    Engines,
    EnginesFactory,
    chat,
    finish,
    pick,
    pick_ok,
    routing_yaml,
    start_with,
    vllm_pool,
    wait_engine,
    wait_engines,
    where,
)
from tests.workers.fake_engine import Mode
from tests.workers.pages import sglang_text, trtllm_text, vllm_text

MODEL = "llama-8b-instruct"
FAILURES_BEFORE_UNREADY = 3  # as in helpers.ENGINE_METRICS


async def _cluster(
    start_engines: EnginesFactory, start_picker: PickerFactory, workers: int = 3
) -> tuple[Engines, RunningPicker]:
    engines = await start_engines(workers)
    policy = "pools:\n" + vllm_pool("chat", engines.endpoints, [MODEL]) + routing_yaml()
    picker = await start_with(start_picker, policy)
    await wait_engines(picker, engines.endpoints)
    return engines, picker


async def _spread(picker: RunningPicker, picks: int, tag: str) -> Counter[str]:
    """Where `picks` distinct prompts go, each finished before the next."""
    seen: Counter[str] = Counter()
    for i in range(picks):
        result = await pick_ok(picker, chat(MODEL, f"{tag} request {i}: explain {i}."))
        await finish(picker, result)
        seen[where(result)] += 1
    return seen


async def _reaches(picker: RunningPicker, endpoint: str, tag: str, within: int = 60) -> bool:
    """Whether one of `within` distinct picks lands on `endpoint` (each 1/3 at random)."""
    for i in range(within):
        result = await pick_ok(picker, chat(MODEL, f"{tag} probe {i}."))
        await finish(picker, result)
        if where(result) == endpoint:
            return True
    return False


@pytest.mark.parametrize(
    ("waiting", "kv"),
    [(4, 0.1), (0, 0.75), (3, 0.6)],
    ids=["deep-queue", "high-kv", "both"],
)
async def test_busy_engine_is_avoided_until_it_recovers(
    start_engines: EnginesFactory, start_picker: PickerFactory, waiting: int, kv: float
) -> None:
    """Below the saturation thresholds (queue 5, KV 0.8) the scorers alone steer away."""
    engines, picker = await _cluster(start_engines, start_picker)
    busy = engines.endpoints[0]
    engines.set(0, waiting=waiting, running=8, kv=kv)
    await wait_engine(picker, busy, waiting=waiting, kv=kv)

    seen = await _spread(picker, 30, "busy")
    assert busy not in seen, seen
    assert set(seen) == set(engines.endpoints[1:]), seen

    engines.set(0)
    await wait_engine(picker, busy)
    assert await _reaches(picker, busy, "recovered")


async def test_queued_requests_count_as_load(
    start_engines: EnginesFactory, start_picker: PickerFactory
) -> None:
    """An engine queue of 4 weighs like 4 picks in flight: the others fill up to it first."""
    engines, picker = await _cluster(start_engines, start_picker)
    queued = engines.endpoints[0]
    engines.set(0, waiting=4)
    await wait_engine(picker, queued, waiting=4)
    held = [await pick_ok(picker, chat(MODEL, f"held {i}.")) for i in range(8)]
    counts = Counter(where(result) for result in held)
    assert counts[queued] == 0, counts  # the others reach 4 in flight only after 8 picks
    ninth = await pick_ok(picker, chat(MODEL, "ninth."))
    assert where(ninth) in engines.endpoints  # all at load 4 now: any of them


@pytest.mark.parametrize("mode", [Mode.FAIL, Mode.DROP, Mode.HANG])
async def test_failing_engine_becomes_not_ready_gets_no_picks_then_recovers(
    start_engines: EnginesFactory, start_picker: PickerFactory, mode: Mode
) -> None:
    engines, picker = await _cluster(start_engines, start_picker)
    broken = engines.endpoints[0]
    slot = picker.app.table.slot(broken)
    engines[0].mode = mode

    # Unknown metrics at the first failure, not ready after failures_before_unready of them.
    await wait_engine(picker, broken, waiting=None, kv=None, ready=False)
    assert not picker.app.engines.scraper.ready(broken)
    assert picker.app.engines.scraper.snapshot(broken) is None
    failed = picker.metric("kinference_engine_scrapes_total", {"result": "error"})
    failed += picker.metric("kinference_engine_scrapes_total", {"result": "timeout"})
    assert failed >= FAILURES_BEFORE_UNREADY

    seen = await _spread(picker, 30, "broken")
    assert broken not in seen, seen
    assert not picker.app.table.ready[slot]

    engines.set(0)  # answers again
    await wait_engine(picker, broken)
    assert picker.app.engines.scraper.ready(broken)
    assert await _reaches(picker, broken, "back")


async def test_failed_scrapes_make_metrics_unknown_before_the_worker_is_unready(
    start_engines: EnginesFactory, start_picker: PickerFactory
) -> None:
    """Below failures_before_unready the worker stays ready with unknown metrics: a reading
    that said saturated does not linger, and unknown is not saturated."""
    engines = await start_engines(2)
    metrics = (
        "{interval_s: 0.05, timeout_s: 0.25, stale_after_s: 0.5, failures_before_unready: 100000}"
    )
    policy = (
        "pools:\n"
        + vllm_pool("chat", engines.endpoints, [MODEL])
        + routing_yaml(engine_metrics=metrics)
    )
    picker = await start_with(start_picker, policy)
    flaky = engines.endpoints[0]
    engines.set(0, waiting=50, kv=0.99)
    await wait_engines(picker, engines.endpoints[1:])
    await wait_engine(picker, flaky, waiting=50, kv=0.99)
    seen = await _spread(picker, 10, "saturated")
    assert flaky not in seen, seen

    engines[0].mode = Mode.FAIL
    await wait_engine(picker, flaky, waiting=None, kv=None, ready=True)
    assert picker.app.engines.scraper.snapshot(flaky) is None
    # Unknown metrics are neither saturated nor shunned: the worker's load is its picks in
    # flight, and picks spread over both (the idle one reads idle at every scrape, as the
    # fake engine serves nothing, so it takes more).
    held = [await pick_ok(picker, chat(MODEL, f"held {i}.")) for i in range(12)]
    assert Counter(where(result) for result in held)[flaky] >= 1


async def test_every_engine_failing_means_no_workers(
    start_engines: EnginesFactory, start_picker: PickerFactory
) -> None:
    engines, picker = await _cluster(start_engines, start_picker, workers=2)
    for engine in engines.engines:
        engine.mode = Mode.FAIL
    for endpoint in engines.endpoints:
        await wait_engine(picker, endpoint, waiting=None, kv=None, ready=False)
    result = await pick(picker, chat(MODEL, "anyone there?"))
    assert result.outcome == NO_WORKERS, where(result)
    assert "no ready endpoint" in result.reason
    assert "default/chat" in result.reason


async def test_worker_with_the_lora_adapter_loaded_is_preferred(
    start_engines: EnginesFactory, start_picker: PickerFactory
) -> None:
    engines = await start_engines(3)
    adapter = "sql-lora"
    policy = "pools:\n" + vllm_pool("chat", engines.endpoints, [MODEL, adapter]) + routing_yaml()
    picker = await start_with(start_picker, policy)
    await wait_engines(picker, engines.endpoints)
    engines[1].text = vllm_text(0, 0, IDLE_KV, lora=f"{adapter},other-lora")
    slot = picker.app.table.slot(engines.endpoints[1])
    await wait_until(
        lambda: adapter in picker.app.table.adapters[slot], what="the adapter list scraped"
    )
    for i in range(10):
        result = await pick_ok(picker, chat(adapter, f"SELECT {i}"))
        await finish(picker, result)
        assert where(result) == engines.endpoints[1]
    # The base model has no adapter affinity: it spreads.
    assert len(await _spread(picker, 24, "base")) >= 2


async def test_stale_metrics_of_a_hanging_engine_become_unknown(
    start_engines: EnginesFactory, start_picker: PickerFactory
) -> None:
    """timeout_s > stale_after_s: a hanging engine's last reading (here: overloaded) ages out
    after stale_after_s, long before its scrape fails, and unknown is not saturated."""
    engines = await start_engines(1)
    hanging = engines.endpoints[0]
    metrics = "{interval_s: 0.05, timeout_s: 5.0, stale_after_s: 0.3}"
    policy = (
        "pools:\n"
        + vllm_pool("chat", engines.endpoints, [MODEL])
        + routing_yaml(engine_metrics=metrics)
    )
    picker = await start_with(start_picker, policy)
    engines.set(0, waiting=50, kv=0.99)
    await wait_engine(picker, hanging, waiting=50, kv=0.99)
    shed = await pick(picker, chat(MODEL, "deferrable, on an overloaded worker"), qos=DEFERRABLE)
    assert shed.outcome == POLICY_REJECTED, where(shed)
    engines[0].mode = Mode.HANG
    await wait_until(
        lambda: picker.app.engines.scraper.snapshot(hanging) is None,
        what="the scraper's reading gone stale",
    )
    # Well within the scrape timeout: the stale reading must no longer count.
    await wait_engine(picker, hanging, waiting=None, kv=None, within_s=1.5)
    result = await pick(
        picker, chat(MODEL, "deferrable, once the reading aged out"), qos=DEFERRABLE
    )
    assert where(result) == hanging  # unknown, so not saturated: not shed


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
async def test_other_engines_metrics_steer_too(
    start_engines: EnginesFactory, start_picker: PickerFactory, engine: str
) -> None:
    page = {"sglang": sglang_text, "trtllm": trtllm_text}[engine]
    engines = await start_engines(2)
    for fake in engines.engines:
        fake.text = page(0, 0, IDLE_KV)
    pool = vllm_pool("chat", engines.endpoints, [MODEL]).replace(
        "engine: vllm", f"engine: {engine}"
    )
    picker = await start_with(start_picker, "pools:\n" + pool + routing_yaml())
    await wait_engines(picker, engines.endpoints)
    engines[0].text = page(3, 4, 0.7)
    await wait_engine(picker, engines.endpoints[0], waiting=3, kv=0.7)
    seen = await _spread(picker, 10, engine)
    assert seen == {engines.endpoints[1]: 10}

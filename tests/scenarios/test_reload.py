"""Policy reload from the file given as `config`: new pools apply, a bad file keeps the old."""

from __future__ import annotations

from pathlib import Path

from tests.api.helpers import wait_until
from tests.conftest import PickerFactory, RunningPicker
from tests.scenarios.helpers import (
    NO_WORKERS,
    OK,
    EnginesFactory,
    chat,
    finish,
    pick,
    routing_yaml,
    start_with,
    vllm_pool,
    wait_engines,
    where,
)

FIRST, SECOND = "first-model", "second-model"
RELOAD_S = 15.0  # the watcher polls once a second; generous for a loaded machine


def _reloads(picker: RunningPicker, result: str) -> float:
    return picker.metric("kinference_policy_reloads_total", {"result": result})


def _last_ok(picker: RunningPicker) -> float:
    return picker.metric("kinference_policy_last_reload_ok")


async def _where(picker: RunningPicker, model: str) -> str:
    result = await pick(picker, chat(model, "hello"))
    if result.outcome == OK:
        await finish(picker, result)
    return where(result)


async def test_reload_applies_new_pools_and_keeps_the_old_policy_on_a_bad_file(
    start_engines: EnginesFactory, start_picker: PickerFactory, tmp_path: Path
) -> None:
    old_engines, new_engines = await start_engines(1), await start_engines(2)
    path = tmp_path / "policy.yaml"
    first = "pools:\n" + vllm_pool("one", old_engines.endpoints, [FIRST]) + routing_yaml()
    path.write_text(first)
    picker = await start_with(start_picker, first, config=path)
    await wait_engines(picker, old_engines.endpoints)
    assert await _where(picker, FIRST) == old_engines.endpoints[0]
    missing = await pick(picker, chat(SECOND, "hello"))
    assert missing.outcome == NO_WORKERS and SECOND in missing.reason

    # A new pool (fake engines, scraped once applied) serving a new model.
    second = first.replace(
        "routing:", vllm_pool("two", new_engines.endpoints, [SECOND]).rstrip("\n") + "\nrouting:"
    )
    path.write_text(second)
    await wait_until(lambda: _reloads(picker, "ok") == 1, RELOAD_S, "the new policy applied")
    assert await _where(picker, SECOND) in new_engines.endpoints
    assert await _where(picker, FIRST) == old_engines.endpoints[0]
    await wait_engines(picker, new_engines.endpoints)  # scraped now
    assert all(engine.requests > 0 for engine in new_engines.engines)
    assert _last_ok(picker) == 1

    # A bad file: the policy in force stays, and the metric says so.
    path.write_text(
        second + "models:\n  - name: broken\n    targets: [{pool: default/none, model: x}]\n"
    )
    await wait_until(lambda: _last_ok(picker) == 0, RELOAD_S, "the failed reload reported")
    assert _reloads(picker, "error") == 1
    assert await _where(picker, SECOND) in new_engines.endpoints
    assert await _where(picker, FIRST) == old_engines.endpoints[0]

    # Fixed by going back to the first file: pool `two` is gone again.
    path.write_text(first)
    await wait_until(lambda: _last_ok(picker) == 1, RELOAD_S, "the good file applied")
    assert _reloads(picker, "ok") == 2
    gone = await pick(picker, chat(SECOND, "hello"))
    assert gone.outcome == NO_WORKERS, where(gone)
    await wait_until(
        lambda: not picker.app.engines.scraper.endpoints & set(new_engines.endpoints),
        what="the removed pool's endpoints no longer scraped",
    )


async def test_unreadable_file_keeps_the_policy(
    start_engines: EnginesFactory, start_picker: PickerFactory, tmp_path: Path
) -> None:
    engines = await start_engines(1)
    path = tmp_path / "policy.yaml"
    text = "pools:\n" + vllm_pool("one", engines.endpoints, [FIRST]) + routing_yaml()
    path.write_text(text)
    picker = await start_with(start_picker, text, config=path)
    path.unlink()
    await wait_until(lambda: _last_ok(picker) == 0, RELOAD_S, "the missing file reported")
    assert await _where(picker, FIRST) == engines.endpoints[0]
    path.write_text("pools: [oops")
    await wait_until(lambda: _reloads(picker, "error") == 2, RELOAD_S, "a new problem counted")
    assert await _where(picker, FIRST) == engines.endpoints[0]


async def test_reload_to_engine_none_keeps_the_workers_routable(
    start_engines: EnginesFactory, start_picker: PickerFactory, tmp_path: Path
) -> None:
    engines = await start_engines(2)
    path = tmp_path / "policy.yaml"
    scraped = "pools:\n" + vllm_pool("one", engines.endpoints, [FIRST]) + routing_yaml()
    path.write_text(scraped)
    picker = await start_with(start_picker, scraped, config=path)
    await wait_engines(picker, engines.endpoints)
    assert await _where(picker, FIRST) in engines.endpoints

    path.write_text(scraped.replace("engine: vllm", "engine: none"))
    await wait_until(lambda: _reloads(picker, "ok") == 1, RELOAD_S, "the new policy applied")
    assert not picker.app.engines.scraper.endpoints
    assert await _where(picker, FIRST) in engines.endpoints

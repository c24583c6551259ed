"""The remote gateway over the PickerSession stream: used when the picker serves it, the
Picker service's calls when it does not, and a stream that breaks fails only the requests
on it (503) before the next request opens a new one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kinference.config import parse_policy
from kinference.gateway import session_link
from tests.api.helpers import nothing_held, wait_until
from tests.conftest import MODEL, PickerFactory, RunningPicker
from tests.gateway.conftest import GatewayFactory, GatewayServer

HI = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hello"}]}


async def remote(
    engine_port: int, start_picker: PickerFactory, start_gateway: GatewayFactory
) -> tuple[RunningPicker, GatewayServer]:
    policy = parse_policy(
        f"pools:\n  - {{namespace: default, name: chat, "
        f'endpoints: ["127.0.0.1:{engine_port}"], models: ["{MODEL}"]}}\n'
    )
    picker = await start_picker(policy)
    return picker, await start_gateway(picker.target)


def reports(picker: RunningPicker) -> float:
    return picker.metric("kinference_reports_total", {"kind": "final_token", "known": "true"})


async def ask(gateway: GatewayServer, body: object, **extra: object) -> tuple[int, bytes]:
    import httpx

    url = f"http://127.0.0.1:{gateway.port}/v1/chat/completions"
    async with httpx.AsyncClient(trust_env=False, timeout=10) as http:
        response = await http.post(url, json=body, **extra)  # type: ignore[arg-type]
        return response.status_code, response.content


@pytest.fixture
async def engine_port(tmp_path: Path) -> AsyncIterator[int]:
    from loadtest.sim_engine import SimEngine
    from tests.gateway.conftest import POOL_ENGINE

    engine = SimEngine(POOL_ENGINE)
    await engine.start(host="127.0.0.1", port=0)
    try:
        yield engine.port
    finally:
        await engine.stop()


async def test_requests_and_reports_ride_on_one_stream(
    engine_port: int, start_picker: PickerFactory, start_gateway: GatewayFactory
) -> None:
    picker, gateway = await remote(engine_port, start_picker, start_gateway)
    for stream in (False, True, False):
        status, _ = await ask(gateway, {**HI, "stream": stream})
        assert status == 200
    assert len(picker.app.session._streams) == 1
    await wait_until(lambda: reports(picker) == 3, what="3 final reports")
    await wait_until(lambda: nothing_held(picker), what="nothing held")


async def test_a_picker_without_the_stream_gets_the_picker_calls(
    engine_port: int,
    start_picker: PickerFactory,
    start_gateway: GatewayFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def unimplemented(*args: object) -> None:
        return None  # as SessionClient.open answers a picker without PickerSession

    monkeypatch.setattr(session_link.SessionClient, "open", unimplemented)
    picker, gateway = await remote(engine_port, start_picker, start_gateway)
    for stream in (False, True):
        status, _ = await ask(gateway, {**HI, "stream": stream})
        assert status == 200
    assert not picker.app.session._streams
    await wait_until(lambda: reports(picker) == 2, what="2 final reports")
    await wait_until(lambda: nothing_held(picker), what="nothing held")


async def test_a_broken_stream_fails_its_requests_and_the_next_opens_a_new_one(
    engine_port: int, start_picker: PickerFactory, start_gateway: GatewayFactory
) -> None:
    picker, gateway = await remote(engine_port, start_picker, start_gateway)
    assert (await ask(gateway, HI))[0] == 200
    body = json.dumps(HI).encode()
    more = asyncio.Event()

    async def slow_body() -> AsyncIterator[bytes]:
        yield body[:5]
        await more.wait()
        yield body[5:]

    headers = {"content-length": str(len(body)), "content-type": "application/json"}
    stalled = asyncio.create_task(ask(gateway, None, content=slow_body(), headers=headers))
    await wait_until(lambda: picker.app.store.budget.used == 5, what="the upload under way")
    streams = list(picker.app.session._streams)
    assert [len(stream.requests) for stream in streams] == [1]
    for stream in streams:
        stream.stop()  # the stream ends under the request
    more.set()  # (the HTTP client reads no answer before it has sent its body)
    status, answer = await asyncio.wait_for(stalled, 10)
    assert status == 503, answer
    assert json.loads(answer)["error"]["code"] == "picker_unavailable"
    assert (await ask(gateway, HI))[0] == 200  # on a new stream
    await wait_until(lambda: nothing_held(picker), what="nothing held")

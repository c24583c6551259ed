"""The gateway end to end under a crowd of clients, some hanging up mid-upload or
mid-stream, clients asking `expect: 100-continue`, a failure between the upstream's answer
and the relay; the upstream side checked too."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from kinference.gateway.app import GatewayApp
from kinference.gateway.http1 import HttpClient
from tests.api.helpers import nothing_held, wait_until
from tests.conftest import MODEL
from tests.gateway.conftest import Stack

HI = [{"role": "user", "content": "hello there"}]


async def test_expect_continue_gets_the_engine_s_answer(stack: Stack) -> None:
    """curl sends `expect: 100-continue` with large bodies; an engine told so answers
    `100 Continue` first: the client gets the engine's final answer, every time."""
    request = {"model": MODEL, "messages": HI, "max_tokens": 4}
    async with stack.http() as http:
        for _ in range(3):
            response = await http.post(
                "/v1/chat/completions", json=request, headers={"expect": "100-continue"}
            )
            assert response.status_code == 200, response.text
            assert json.loads(response.content)["usage"]["completion_tokens"] == 4
    await wait_until(lambda: nothing_held(stack.picker), what="nothing held")


def upstream_client(stack: Stack) -> HttpClient:
    app = stack.gateway.server.config.app
    assert isinstance(app, GatewayApp) and app.gateway is not None
    return app.gateway.http


def engine_connections(stack: Stack) -> int:
    """The connections the engines' servers hold open (the gateway's, upstream)."""
    total = 0
    for engine in stack.chat:
        assert engine._server is not None
        total += len(engine._server.server_state.connections)
    return total


async def hang_up_mid_upload(stack: Stack) -> None:
    _reader, writer = await asyncio.open_connection("127.0.0.1", stack.gateway.port)
    try:
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\n"
            b"content-type: application/json\r\ncontent-length: 100000\r\n\r\n"
            b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", "content": "'
        )
        await writer.drain()
    finally:
        writer.close()
        await writer.wait_closed()


async def hang_up_mid_stream(http: httpx.AsyncClient) -> None:
    request = {"model": MODEL, "messages": HI, "max_tokens": 5000, "stream": True}
    async with http.stream("POST", "/v1/chat/completions", json=request) as response:
        assert response.status_code == 200
        async for chunk in response.aiter_raw():
            if b"content" in chunk:
                return  # one token seen: hang up


async def complete(http: httpx.AsyncClient) -> None:
    request = {"model": MODEL, "messages": HI, "max_tokens": 4, "stream": True}
    response = await http.post("/v1/chat/completions", json=request)
    assert response.status_code == 200 and b"[DONE]" in response.content


async def test_a_crowd_hanging_up_mid_upload_and_mid_stream_leaves_nothing_behind(
    stack: Stack,
) -> None:
    """Abandoned requests' upstream connections are closed, not pooled; the picker holds
    nothing; every connection the engine still has is one the gateway pooled cleanly."""
    async with stack.http() as http:  # one client per request: each hangs up on its own
        crowd = []
        for index in range(60):
            kind = index % 3
            if kind == 0:
                crowd.append(hang_up_mid_upload(stack))
            else:
                crowd.append((hang_up_mid_stream if kind == 1 else complete)(http))
        await asyncio.gather(*crowd)
    await wait_until(
        lambda: sum(engine.stats()["running"] for engine in stack.chat) == 0,
        what="the engine to see every abandoned stream's connection closed",
    )
    await wait_until(lambda: nothing_held(stack.picker), what="the picker to release all")
    http1 = upstream_client(stack)
    pooled = [conn for idle in http1._idle.values() for conn in idle]
    assert all(not conn.asked and not conn.closed for conn in pooled)
    await wait_until(
        lambda: engine_connections(stack) <= len(pooled) + 1,  # + a spare on its way
        what="the engine to hold no connection the gateway did not pool",
    )


async def test_a_failure_after_the_upstream_answered_closes_its_connection(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever fails between the response head and the relay (here the transforms) must not
    leave the upstream connection open, its engine generating for nobody."""
    app = stack.gateway.server.config.app
    assert isinstance(app, GatewayApp) and app.gateway is not None

    def broken(exchange: object) -> None:
        raise RuntimeError("a transform that fails")

    monkeypatch.setattr(app.gateway.flow._transforms, "for_exchange", broken)
    request = {"model": MODEL, "messages": HI, "max_tokens": 5000, "stream": True}  # ~12 s
    async with stack.http() as http:
        response = await http.post("/v1/chat/completions", json=request)
    assert response.status_code == 500
    await wait_until(
        lambda: sum(engine.stats()["running"] for engine in stack.chat) == 0,
        within_s=5.0,
        what="the engine to see the upstream connection closed",
    )
    await wait_until(lambda: nothing_held(stack.picker), what="the picker to release it")

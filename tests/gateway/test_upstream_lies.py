"""Upstreams that answer what no engine should: token counts no report can carry, a status
outside HTTP's range, their own `x-request-id`. The client gets a well-formed answer, the
picker its report (nothing held afterwards), and the log no traceback."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest

from kinference.config import parse_policy
from kinference.gateway.server import GatewayServer
from tests.api.helpers import wait_until
from tests.conftest import MODEL, PickerFactory, RunningPicker
from tests.gateway.conftest import GatewayFactory, gateway_in_mode, policy_text
from tests.gateway.counting_upstream import Answer, Upstream, read_request

HUGE = 2**40  # past the reports' uint32


def chat(stream: bool) -> bytes:
    request = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    return json.dumps(request).encode()


def answering(*responses: bytes) -> Answer:
    """An upstream answering each request with the next of `responses`, then closing."""
    left = list(responses)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(left.pop(0))
        await writer.drain()
        writer.close()
        raise ConnectionResetError  # done with this connection

    return answer


def whole(status: bytes, document: object, *extra: bytes) -> bytes:
    body = json.dumps(document).encode()
    head = b"HTTP/1.1 %s\r\ncontent-type: application/json\r\n" % status
    return head + b"".join(extra) + b"content-length: %d\r\n\r\n%s" % (len(body), body)


def stream(*events: object) -> bytes:
    data = b"".join(b"data: %s\n\n" % json.dumps(event).encode() for event in events)
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n" + data + b"data: [DONE]\n\n"
    )


CONTENT = {"model": MODEL, "choices": [{"index": 0, "delta": {"content": "hi"}}]}
LYING_STREAM = stream(CONTENT, {"model": MODEL, "choices": [], "usage": {
    "prompt_tokens": HUGE, "completion_tokens": True}})  # fmt: skip
LYING_WHOLE = whole(b"200 OK", {"model": "m" * 100_000, "choices": [], "usage": {
    "prompt_tokens": 7, "completion_tokens": HUGE * HUGE}})  # fmt: skip


async def stack(
    mode: str, upstream: Upstream, start_picker: PickerFactory, start_gateway: GatewayFactory
) -> tuple[RunningPicker, GatewayServer]:
    engine = upstream.url.removeprefix("http://")
    picker = await start_picker(parse_policy(policy_text([engine], engine, engine)))
    return picker, await gateway_in_mode(mode, picker, start_gateway)


@pytest.mark.parametrize("mode", ["remote", "in-process"])
async def test_token_counts_no_report_can_carry_are_not_taken(
    mode: str,
    start_picker: PickerFactory,
    start_gateway: GatewayFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: in remote mode the final report failed to build (a traceback per response,
    the request held as load until its TTL); in process 2**40 prompt tokens were counted."""
    async with Upstream(answering(LYING_STREAM, LYING_WHOLE)) as upstream:
        picker, gateway = await stack(mode, upstream, start_picker, start_gateway)
        url = f"http://127.0.0.1:{gateway.port}/v1/chat/completions"
        async with httpx.AsyncClient(trust_env=False) as http:
            for streamed in (True, False):
                answer = await http.post(url, content=chat(streamed))
                assert answer.status_code == 200
        await wait_until(lambda: len(picker.app.inflight) == 0, what="both released")
    assert picker.metric("kinference_tokens_total", {"kind": "prompt"}) == 7
    assert picker.metric("kinference_tokens_total", {"kind": "completion"}) == 1  # counted
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


@pytest.mark.parametrize("mode", ["remote", "in-process"])
async def test_a_status_outside_http_s_range_is_a_bad_gateway(
    mode: str,
    start_picker: PickerFactory,
    start_gateway: GatewayFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: relayed as it came, uvicorn failed on it (no status line for 999): the
    client's connection closed without an answer, a traceback logged."""
    weird = b"HTTP/1.1 999 Weird\r\ncontent-length: 2\r\n\r\nok"
    async with Upstream(answering(weird)) as upstream:
        picker, gateway = await stack(mode, upstream, start_picker, start_gateway)
        url = f"http://127.0.0.1:{gateway.port}/v1/chat/completions"
        async with httpx.AsyncClient(trust_env=False) as http:
            answer = await http.post(url, content=chat(False))
        await wait_until(lambda: len(picker.app.inflight) == 0, what="the request aborted")
    assert answer.status_code == 502 and answer.json()["error"]["code"] == "upstream_error"
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


async def test_the_client_gets_one_request_id_and_the_upstream_s_apart(
    start_picker: PickerFactory, start_gateway: GatewayFactory
) -> None:
    """An upstream answering with its own `x-request-id` (OpenAI's API does; vLLM echoes
    the one it got): before, the client got two."""
    asked: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await read_request(reader)
        asked.append(head)
        writer.write(whole(b"200 OK", {"model": MODEL}, b"x-request-id: req_upstream\r\n"))
        await writer.drain()

    async with Upstream(answer) as upstream:
        _picker, gateway = await stack("remote", upstream, start_picker, start_gateway)
        url = f"http://127.0.0.1:{gateway.port}/v1/chat/completions"
        async with httpx.AsyncClient(trust_env=False) as http:
            mine = await http.post(url, content=chat(False), headers={"x-request-id": "mine"})
            unusable = "x" * 1000  # too long: the gateway makes its own
            other = await http.post(url, content=chat(False), headers={"x-request-id": unusable})
    for answered in (mine, other):
        assert answered.headers.get_list("x-request-id") != [], answered.headers
        assert len(answered.headers.get_list("x-request-id")) == 1
        assert answered.headers["x-upstream-request-id"] == "req_upstream"
    assert mine.headers["x-request-id"] == "mine"
    ours = other.headers["x-request-id"].encode()
    assert ours != unusable.encode()
    sent = [[line for line in head.split(b"\r\n") if line.startswith(b"x-request-id")]
            for head in asked]  # fmt: skip
    assert sent == [[b"x-request-id: mine"], [b"x-request-id: " + ours]]  # the same id upstream

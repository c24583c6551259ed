"""An engine failing after its response head went out, end to end through the real server:
the client's response ends as clients expect (an error event for a stream, a cut body
otherwise), the failure is counted and aborted, one line is logged and no traceback."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import openai
import pytest

from kinference.config import parse_policy
from kinference.gateway.errors import GatewayError
from tests.api.helpers import nothing_held, wait_until
from tests.conftest import MODEL, PickerFactory, RunningPicker
from tests.gateway.conftest import GatewayFactory, free_port, policy_text
from tests.gateway.counting_upstream import Upstream, read_request

EVENT = b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)
JSON_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n"
# What each engine sends before its connection dies: a whole event, a whole event and half
# of the next (in one read, and in two), part of a JSON body.
SENT = {
    "between-events": SSE_HEAD + b"%x\r\n%s\r\n" % (len(EVENT), EVENT),
    "mid-event": SSE_HEAD + b"%x\r\n%s\r\n" % (2 * len(EVENT) - 5, EVENT + EVENT[:-5]),
    "mid-event-later": SSE_HEAD
    + b"%x\r\n%s\r\n%x\r\n%s\r\n" % (len(EVENT) + 9, EVENT + EVENT[:9], 20, EVENT[9:29]),
    "json": JSON_HEAD + b'{"id":"c1",',
}


def dying(sent: bytes, *, stall: bool = False) -> Upstream:
    """Sends `sent`, then resets the connection, or (`stall`) goes silent."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(sent)
        await writer.drain()
        if stall:
            await reader.read()  # until the gateway gives up and closes
        writer.transport.abort()
        raise ConnectionResetError

    return Upstream(answer)


async def gateway_to(
    upstream: Upstream, start_picker: PickerFactory, start_gateway: GatewayFactory
) -> tuple[RunningPicker, str]:
    dead = f"127.0.0.1:{free_port()}"
    endpoint = upstream.url.removeprefix("http://")
    picker = await start_picker(parse_policy(policy_text([endpoint], dead, dead)))
    gateway = await start_gateway(picker.target, read_timeout_s=0.3)  # a stall: 0.3 s
    return picker, f"http://127.0.0.1:{gateway.port}"


def failed_502(metrics: str) -> bool:
    return any(
        line.startswith("kinference_gateway_requests_total{") and 'status="502"' in line
        for line in metrics.splitlines()
    )


@pytest.mark.parametrize("stall", [False, True], ids=["reset", "stall"])
@pytest.mark.parametrize(
    ("where", "usage"),
    [
        ("between-events", False),
        ("mid-event", False),
        ("mid-event", True),
        ("mid-event-later", False),
        ("mid-event-later", True),
        ("json", False),
    ],
)
async def test_an_upstream_dying_mid_response_ends_it_as_clients_expect(  # noqa: PLR0917
    where: str,
    usage: bool,
    stall: bool,
    start_picker: PickerFactory,
    start_gateway: GatewayFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Reset, or silent past the read timeout, after the head and some of the body. A
    stream cut in the middle of an event ends with the error event too, the partial event
    dropped: with `usage` the client asked for the usage chunk, so its stream has no
    transform (before: its partial event went out as it came and the stream was cut; without
    `usage`, the partial event was held and the stream cut)."""
    caplog.set_level(logging.WARNING)
    async with dying(SENT[where], stall=stall) as upstream:
        picker, url = await gateway_to(upstream, start_picker, start_gateway)
        request: dict[str, object] = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "hi"}],
        }
        if usage:
            request |= {"stream": True, "stream_options": {"include_usage": True}}
        async with httpx.AsyncClient(base_url=url, timeout=30, trust_env=False) as http:
            async with http.stream("POST", "/v1/chat/completions", json=request) as response:
                assert response.status_code == 200
                if where != "json":  # the stream ends, its last event the error
                    body = await response.aread()
                    assert body.startswith(EVENT)
                    error = json.loads(body[len(EVENT) :].removeprefix(b"data: "))
                    assert error["error"]["code"] == "upstream_error"
                else:  # cut short: the client cannot take it for whole
                    with pytest.raises(httpx.RemoteProtocolError):
                        await response.aread()
            metrics = (await http.get("/metrics")).text
        await wait_until(lambda: nothing_held(picker), what="the picker told (Abort)")
    assert failed_502(metrics)
    assert not any(record.exc_info for record in caplog.records), caplog.text
    lines = [r.getMessage() for r in caplog.records if "mid-response" in r.getMessage()]
    assert len(lines) == 1 and "hi" not in lines[0], caplog.text  # one line, no body


async def test_the_sdks_raise_the_api_s_error_on_a_stream_cut_mid_event(
    start_picker: PickerFactory, start_gateway: GatewayFactory
) -> None:
    """What the official SDK makes of it: the whole event, then its APIError (before: the
    stream cut, httpx's RemoteProtocolError; a partial event followed by an error event
    would have been one event of broken JSON, a JSONDecodeError)."""
    async with dying(SENT["mid-event"]) as upstream:
        _picker, url = await gateway_to(upstream, start_picker, start_gateway)
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk", max_retries=0)
        stream = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
        )
        seen = []
        with pytest.raises(openai.APIError) as raised:
            async for chunk in stream:
                seen.append(chunk.choices[0].delta.content)
        await client.close()
    assert seen == ["hi"]
    assert raised.value.code == "upstream_error"


def test_the_error_event_takes_each_api_s_shape() -> None:
    error = GatewayError(502, "upstream_error", "the upstream failed mid-stream")
    openai = error.event("/v1/chat/completions")
    assert openai.startswith(b"data: {") and openai.endswith(b"\n\n")
    assert json.loads(openai[6:])["error"]["code"] == "upstream_error"
    anthropic = error.event("/v1/messages")
    name, data = anthropic.split(b"\n", 1)
    assert name == b"event: error"
    assert json.loads(data.removeprefix(b"data: "))["error"]["type"] == "api_error"


USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}\n\n'
# A stream sent to its own end: OpenAI's `[DONE]`, Anthropic's `message_stop`, the
# Responses API's `response.completed`.
WHOLE = {
    "done": EVENT + USAGE + b"data: [DONE]\n\n",
    "message_stop": EVENT + USAGE + b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    # The Responses API's terminal event (no `[DONE]` follows it).
    "response.completed": EVENT
    + USAGE
    + b'event: response.completed\ndata: {"type":"response.completed"}\n\n',
}


@pytest.mark.parametrize("stall", [False, True], ids=["reset", "stall"])
@pytest.mark.parametrize("end", sorted(WHOLE))
async def test_an_upstream_failing_after_the_stream_s_end_is_a_success(
    end: str,
    stall: bool,
    start_picker: PickerFactory,
    start_gateway: GatewayFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The stream's end went by, then the connection reset or went silent: the client gets
    the stream whole and its normal end, nothing appended; a success in the metrics and for
    the picker (its final report with the usage seen). Before: an error event, a 502, an
    Abort and a warning."""
    caplog.set_level(logging.WARNING)
    stream = WHOLE[end]
    async with dying(SSE_HEAD + b"%x\r\n%s\r\n" % (len(stream), stream), stall=stall) as upstream:
        picker, url = await gateway_to(upstream, start_picker, start_gateway)
        request = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        async with httpx.AsyncClient(base_url=url, timeout=30, trust_env=False) as http:
            async with http.stream("POST", "/v1/chat/completions", json=request) as response:
                assert response.status_code == 200
                # The usage chunk the client did not ask for is hidden, as on a normal end.
                assert await response.aread() == stream.replace(USAGE, b"")
            metrics = (await http.get("/metrics")).text
        await wait_until(lambda: nothing_held(picker), what="the picker told")
    assert not failed_502(metrics)
    assert picker.metric("kinference_reports_total", {"kind": "final_token", "known": "true"}) == 1
    assert picker.metric("kinference_reports_total", {"kind": "abort", "known": "true"}) == 0
    assert picker.metric("kinference_tokens_total", {"kind": "prompt"}) == 7
    assert picker.metric("kinference_tokens_total", {"kind": "completion"}) == 3
    assert not caplog.records, caplog.text  # no warning: at most a debug line

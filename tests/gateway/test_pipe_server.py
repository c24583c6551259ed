"""The piped relay end to end through the real server: the client's bytes are the
upstream's, the direct writes are taken, and a client that stops reading holds the stream
(the direct write refused at its full socket, the ASGI send waiting) without losing a byte."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from kinference.gateway import joined
from tests.conftest import MODEL, PickerFactory
from tests.gateway.conftest import GatewayFactory
from tests.gateway.counting_upstream import Upstream, read_request
from tests.gateway.test_midstream import gateway_to
from tests.gateway.test_pipe import chat, event, per_event

DONE = b"data: [DONE]\n\n"

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)
ASKED = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
    "stream_options": {"include_usage": True},  # asked: nothing hidden, bytes as sent
}


def counted_writes(
    monkeypatch: pytest.MonkeyPatch, refused: asyncio.Event | None = None
) -> list[bool]:
    """What each of the server's direct writes answered; `refused` set at the first False."""
    answers: list[bool] = []
    write_body = joined._write_body

    def counting(cycle: Any, body: bytes) -> bool:
        answers.append(write_body(cycle, body))
        if refused is not None and not answers[-1]:
            refused.set()
        return answers[-1]

    monkeypatch.setattr(joined, "_write_body", counting)
    return answers


async def test_a_stream_through_the_server_is_piped_and_arrives_as_sent(
    start_picker: PickerFactory, start_gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each event is sent once the client has the one before: every read but the last is
    piped (written directly), and the client's body is the upstream's, byte for byte."""
    answers = counted_writes(monkeypatch)
    events, arrived = per_event(chat(6)), asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD)
        for one in events:
            arrived.clear()
            writer.write(b"%x\r\n%s\r\n" % (len(one), one))
            await writer.drain()
            await arrived.wait()
        writer.write(b"0\r\n\r\n")

    async with Upstream(answer) as upstream:
        _picker, url = await gateway_to(upstream, start_picker, start_gateway)
        body = b""
        async with (
            httpx.AsyncClient(base_url=url, timeout=30, trust_env=False) as http,
            http.stream("POST", "/v1/chat/completions", json=ASKED) as response,
        ):
            async for piece in response.aiter_bytes():
                body += piece
                arrived.set()
    assert body == b"".join(events)
    assert all(answers) and len(answers) >= len(events) - 1  # the first may come with the head


async def test_a_client_not_reading_holds_the_stream_and_loses_no_byte(
    start_picker: PickerFactory, start_gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client reads nothing until a direct write is refused (its socket is full): the
    stream waits there (the ASGI send), then goes on, all of it, piped again."""
    refused = asyncio.Event()
    answers = counted_writes(monkeypatch, refused)
    big = event('"choices":[{"index":0,"delta":{"content":"' + "x" * 65536 + '"}}]')
    sent: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD)
        more = 16  # events after the first refusal (the client reads from then on)
        while more and len(sent) < 2000:  # at most ~130 MB; sockets fill long before
            writer.write(b"%x\r\n%s\r\n" % (len(big), big))
            sent.append(big)
            await writer.drain()
            more -= refused.is_set()
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(DONE), DONE))
        sent.append(DONE)

    async with Upstream(answer) as upstream:
        _picker, url = await gateway_to(upstream, start_picker, start_gateway)
        async with (
            httpx.AsyncClient(base_url=url, timeout=30, trust_env=False) as http,
            http.stream("POST", "/v1/chat/completions", json=ASKED) as response,
        ):
            await asyncio.wait_for(refused.wait(), 30)
            body = await response.aread()
    assert body == b"".join(sent)
    assert answers.index(False) > 0 and answers[-1]  # piped before, and again after

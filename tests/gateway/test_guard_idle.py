"""Connections with no request under way (kinference.gateway.guard): an answered request
whose body keeps coming, and bytes between requests that begin none. Before, uvicorn's
protocol cancelled the keep-alive timer on any byte and armed nothing in its place, so
either held its connection (one of the capped ones) for ever."""

from __future__ import annotations

import asyncio
import json

from tests.conftest import MODEL, PickerFactory
from tests.gateway.conftest import GatewayFactory
from tests.gateway.test_guard import LINE, WAIT_S, answer, gateway


async def _closed_after_the_answer(reader: asyncio.StreamReader) -> None:
    """The rest of the answer whose head was read, then the connection's end."""
    async with asyncio.timeout(WAIT_S):
        rest = await reader.read()
    assert json.loads(rest)["error"]["code"] == "invalid_qos"


async def test_a_body_still_coming_after_its_answer_is_let_go(
    start_picker: PickerFactory, start_gateway: GatewayFactory
) -> None:
    """Answered before its body (an unknown QoS class: 400 at once), the client keeps
    sending: the rest is read and dropped for the client timeout, then the connection
    closes (before: held as long as a byte came now and then, with no timer at all)."""
    _picker, port = await gateway(start_picker, start_gateway)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(LINE + b"x-kinference-qos: nope\r\ncontent-length: 1000000\r\n\r\n{")
    async with asyncio.timeout(WAIT_S):
        head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    writer.write(b" ")  # more of the body, after its answer
    await writer.drain()
    await _closed_after_the_answer(reader)
    writer.close()


async def test_a_body_finished_after_its_answer_leaves_the_connection_idle(
    start_picker: PickerFactory, start_gateway: GatewayFactory
) -> None:
    """The rest of an early-answered body arrives whole: the connection is idle, closed
    when its keep-alive time is up (before: never)."""
    _picker, port = await gateway(start_picker, start_gateway)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"model": MODEL, "messages": []}).encode()
    writer.write(LINE + b"x-kinference-qos: nope\r\ncontent-length: %d\r\n\r\n" % len(body))
    async with asyncio.timeout(WAIT_S):
        head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    writer.write(body)
    await writer.drain()
    await _closed_after_the_answer(reader)
    writer.close()


async def test_an_empty_line_between_requests_keeps_the_connection_idle(
    start_picker: PickerFactory, start_gateway: GatewayFactory
) -> None:
    """After a response, a client sends `\\r\\n` (which begins no request) and nothing
    else: the connection is closed when its keep-alive time is up (before: never)."""
    _picker, port = await gateway(start_picker, start_gateway)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /health HTTP/1.1\r\nhost: gateway\r\n\r\n")
    async with asyncio.timeout(WAIT_S):
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
    writer.write(b"\r\n")
    await writer.drain()
    assert await answer(reader) == (0, b"")
    writer.close()

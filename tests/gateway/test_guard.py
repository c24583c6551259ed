"""Clients the gateway's HTTP server bounds (kinference.gateway.guard), over real sockets: a
request head too large, one sent too slowly, a connection that says nothing, a client that
never reads its response."""

from __future__ import annotations

import asyncio
import json
import logging
import socket

import pytest

from kinference.config import parse_policy
from kinference.gateway.guard import REQUEST_HEAD_MAX
from tests.api.helpers import nothing_held, wait_until
from tests.conftest import MODEL, PickerFactory, RunningPicker
from tests.gateway.conftest import GatewayFactory, free_port, policy_text
from tests.gateway.counting_upstream import Upstream, read_request

TIMEOUT_S = 0.3  # the gateway's client timeout here
WAIT_S = 10.0  # the longest a test waits for the gateway to act
LINE = b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\n"


async def gateway(
    start_picker: PickerFactory, start_gateway: GatewayFactory, engine: str = ""
) -> tuple[RunningPicker, int]:
    dead = f"127.0.0.1:{free_port()}"
    picker = await start_picker(parse_policy(policy_text([engine or dead], dead, dead)))
    server = await start_gateway(picker.target, client_timeout_s=TIMEOUT_S)
    return picker, server.port


async def answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """The status and body of the gateway's answer, read to the connection's end."""
    async with asyncio.timeout(WAIT_S):
        data = await reader.read()
    head, _, body = data.partition(b"\r\n\r\n")
    return (int(head.split(b" ")[1]) if head else 0), body


async def test_a_request_head_too_large_is_431_and_closed(
    start_picker: PickerFactory, start_gateway: GatewayFactory
) -> None:
    """Before: held whole, without limit (200 MiB of one header took 100 s of CPU)."""
    _picker, port = await gateway(start_picker, start_gateway)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(LINE + b"x-big: ")
    piece = b"a" * 16 * 1024
    try:
        for _ in range(8 * REQUEST_HEAD_MAX // len(piece)):  # until the gateway closes
            writer.write(piece)
            await writer.drain()
    except ConnectionError:
        pass
    status, body = await answer(reader)
    assert status == 431 and json.loads(body)["error"]["code"] == "request_header_too_large"
    writer.close()


async def test_a_whole_head_too_large_is_one_refusal_one_line(
    start_picker: PickerFactory, start_gateway: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A whole head over the limit, measured at its end (it stops uvicorn's parser). Before:
    uvicorn's "Invalid HTTP request received." was logged beside ours."""
    caplog.set_level(logging.WARNING)
    _picker, port = await gateway(start_picker, start_gateway)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(LINE + b"x-big: " + b"a" * 2 * REQUEST_HEAD_MAX + b"\r\n\r\n")
    status, _body = await answer(reader)
    writer.close()
    assert status == 431
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1 and "request head over" in lines[0], lines


async def test_a_request_head_sent_too_slowly_is_408_and_closed(
    start_picker: PickerFactory, start_gateway: GatewayFactory
) -> None:
    """A client stopping in the middle of its head (slow loris; before: held for ever)."""
    _picker, port = await gateway(start_picker, start_gateway)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(LINE + b"content-type: appl")
    status, body = await answer(reader)
    assert status == 408 and json.loads(body)["error"]["code"] == "request_timeout"
    writer.close()


async def test_a_connection_saying_nothing_is_closed(
    start_picker: PickerFactory, start_gateway: GatewayFactory
) -> None:
    _picker, port = await gateway(start_picker, start_gateway)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    assert await answer(reader) == (0, b"")
    writer.close()


async def test_a_client_never_reading_its_response_is_let_go_and_the_request_aborted(
    start_picker: PickerFactory, start_gateway: GatewayFactory
) -> None:
    """The response waits for the client's socket (backpressure, memory bounded); a client
    that leaves it full for the timeout has its connection reset, the upstream's closed and
    the picker told (before: all held for ever)."""
    event = b"data: " + b"x" * 8000 + b"\n\n"

    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
        while True:  # until the gateway closes the connection
            writer.write(event)
            await writer.drain()

    async with Upstream(endless) as upstream:
        picker, port = await gateway(
            start_picker, start_gateway, upstream.url.removeprefix("http://")
        )
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader, writer = await asyncio.open_connection(sock=sock)
        request = json.dumps({"model": MODEL, "messages": [], "stream": True}).encode()
        writer.write(LINE + b"content-length: %d\r\n\r\n%s" % (len(request), request))
        await upstream.until(lambda: upstream.accepted == 1)
        await upstream.until(lambda: upstream.open == 0, timeout_s=WAIT_S)
        await wait_until(lambda: nothing_held(picker), what="the request aborted")
        reader.feed_eof()
        writer.close()


async def test_a_crowd_of_good_and_hostile_clients_leaves_nothing_behind(
    start_picker: PickerFactory, start_gateway: GatewayFactory
) -> None:
    """Clients that complete, send half a head, send an oversize head, never read their
    stream, or hang up mid-stream, all at once: every complete one is answered, each
    hostile one is let go, and the picker and the engine hold nothing afterwards (the
    clients that never read keep their sockets open until then)."""
    event = b"data: " + b"x" * 8000 + b"\n\n"
    answer = b"data: {}\n\ndata: [DONE]\n\n"
    done = (
        b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-type: text/event-stream\r\n"
        b"content-length: %d\r\n\r\n%s"
        % (
            len(answer),
            answer,
        )
    )

    streaming = [0]  # responses the engine is writing (pooled idle connections aside)

    async def engine(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await read_request(reader)
        if b"x-kind: complete" in head:
            writer.write(done)
            await writer.drain()
            writer.close()  # as its head says (not pooled: only the endless stay open)
            raise ConnectionResetError
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
        streaming[0] += 1
        try:
            while True:  # until the gateway closes the connection
                writer.write(event)
                await writer.drain()
        finally:
            streaming[0] -= 1

    async def ask(kind: str) -> tuple[bytes, asyncio.StreamWriter]:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader, writer = await asyncio.open_connection(sock=sock)
        if kind == "half-head":
            writer.write(LINE + b"content-ty")
        elif kind == "oversize":
            writer.write(LINE + b"x-big: " + b"a" * 2 * REQUEST_HEAD_MAX + b"\r\n\r\n")
        else:
            request = json.dumps({"model": MODEL, "messages": [], "stream": True}).encode()
            writer.write(
                LINE
                + b"x-kind: %s\r\ncontent-length: %d\r\n\r\n%s"
                % (kind.encode(), len(request), request)
            )
        if kind == "endless":
            return b"", writer  # never read, never closed until the end
        async with asyncio.timeout(WAIT_S):
            if kind == "hang-up":
                got = await reader.readuntil(b"\r\n\r\n")
            elif kind == "complete":
                got = await reader.readuntil(b"[DONE]")
            else:
                got = await reader.read()
        writer.close()
        return got, writer

    async with Upstream(engine) as upstream:
        picker, port = await gateway(
            start_picker, start_gateway, upstream.url.removeprefix("http://")
        )
        kinds = ["complete", "half-head", "oversize", "endless", "hang-up"] * 6
        answers = await asyncio.gather(*(ask(kind) for kind in kinds))
        status = {"complete": b"200", "half-head": b"408", "oversize": b"431", "hang-up": b"200"}
        for kind, (got, _writer) in zip(kinds, answers, strict=True):
            assert kind == "endless" or got.startswith(b"HTTP/1.1 " + status[kind]), (kind, got)
            assert kind != "complete" or b"[DONE]" in got
        await upstream.until(lambda: streaming[0] == 0, timeout_s=WAIT_S)
        await wait_until(lambda: nothing_held(picker), what="nothing held")
        for _got, writer in answers:
            writer.close()

"""The upstream client against upstreams that misbehave or refuse: interim responses,
unsolicited bytes, resets, cancelled requests; sockets counted on the server's side."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator

import pytest

from kinference.gateway.http1 import Broken, HttpClient, ReadTimeout, UpstreamError
from tests.gateway.counting_upstream import OK, Upstream, body, read_request

LENGTH0 = [("content-length", "0")]


def client(*, keep_spare: bool = False) -> HttpClient:
    return HttpClient(connect_timeout_s=2.0, read_timeout_s=10.0, keep_spare=keep_spare)


async def fetch(http: HttpClient, url: str) -> tuple[int, bytes]:
    response = await http.request("POST", url, LENGTH0, body())
    try:
        return response.status, await response.read()
    finally:
        response.close()


@pytest.mark.parametrize("interim", [b"100 Continue", b"103 Early Hints\r\nlink: </a>; rel=x"])
async def test_interim_responses_are_skipped(interim: bytes) -> None:
    """An upstream told `expect: 100-continue`, or sending early hints, answers 1xx first:
    the response is the final one, and the connection stays in step for the next."""
    interim_sent = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 " + interim + b"\r\n\r\n")
        await writer.drain()
        interim_sent.set()
        await reader.readexactly(2)  # the body's second half follows the interim response
        writer.write(OK)
        await writer.drain()

    async def halves() -> AsyncIterator[bytes]:
        yield b"a"
        await interim_sent.wait()
        interim_sent.clear()
        yield b"b"

    async with Upstream(answer) as upstream:
        http = client()
        try:
            for _ in range(2):
                response = await http.request(
                    "POST", upstream.url, [("content-length", "2")], halves()
                )
                assert (response.status, await response.read()) == (200, b"ok")
                response.close()
            assert upstream.accepted == 1
        finally:
            await http.aclose()


async def test_a_response_nobody_asked_for_is_never_handed_to_a_request() -> None:
    """Bytes after a complete response (a second response, as from a desynchronised or
    hostile upstream) would answer the next request sent on the connection: the
    connection is dropped instead, and each request gets its own answer."""
    answers = 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal answers
        await read_request(reader)
        answers += 1
        stale = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nstale"
        writer.write(f"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-n: {answers}\r\n\r\nok".encode())
        writer.write(stale)
        await writer.drain()

    async with Upstream(answer) as upstream:
        http = client()
        try:
            for _ in range(3):
                response = await http.request("POST", upstream.url, LENGTH0, body())
                assert response.status == 200
                assert await response.read() == b"ok"
                assert [v for k, v in response.headers if k == "x-n"] == [str(upstream.accepted)]
                response.close()
            assert upstream.accepted == 3  # no connection was used again
        finally:
            await http.aclose()


async def test_bytes_arriving_on_an_idle_connection_get_it_dropped() -> None:
    idle = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(OK)
        await writer.drain()
        await idle.wait()  # the client took the response: the connection is in its pool
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nstale")
        await writer.drain()
        await reader.read()

    async with Upstream(answer) as upstream:
        http = client()
        try:
            assert await fetch(http, upstream.url) == (200, b"ok")
            idle.set()
            await upstream.until(lambda: upstream.open == 0, timeout_s=2)
            idle.clear()
            assert await fetch(http, upstream.url) == (200, b"ok")
        finally:
            await http.aclose()


async def test_switching_protocols_unasked_is_a_broken_upstream(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\n")
        writer.write(b"upgrade: websocket\r\n\r\n\x81\x00")
        await writer.drain()
        await reader.read()

    async with Upstream(answer) as upstream:
        http = client()
        try:
            with pytest.raises(Broken):
                await fetch(http, upstream.url)
            await upstream.until(lambda: upstream.open == 0, timeout_s=2)
        finally:
            await http.aclose()
    assert not [record for record in caplog.records if record.levelname == "ERROR"]


@pytest.mark.parametrize("endless", [b"x-a: " + b"a" * 65536, b"HTTP/1.1 103 Early Hints\r\n\r\n"])
async def test_an_endless_response_head_is_cut_short(endless: bytes) -> None:
    """A head that never ends (one endless header, or interim responses without end) would
    be buffered until the read timeout (600 s by default): it fails once past `MAX_HEAD`."""
    sent = 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n" if endless.startswith(b"x-a") else b"")
        while sent < 64 * 1024 * 1024:
            writer.write(endless)
            sent += len(endless)
            await writer.drain()
        await reader.read()

    async with Upstream(answer) as upstream:
        http = client()
        try:
            async with asyncio.timeout(5):  # the read timeout is 10 s
                with pytest.raises(Broken, match="head"):
                    await fetch(http, upstream.url)
            await upstream.until(lambda: upstream.open == 0)
            assert sent < 16 * 1024 * 1024  # what the sockets hold, not what the server had
        finally:
            await http.aclose()


async def test_an_upstream_that_stops_reading_the_body_times_out() -> None:
    """An engine that takes the head and never reads the body: the request's writes wait on
    a full socket; past the read timeout without progress they fail, not wait forever."""
    MiB = 1024 * 1024
    done = asyncio.Event()

    async def never_reads(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await done.wait()

    async def large() -> AsyncIterator[bytes]:
        for _ in range(512):
            yield b"x" * MiB

    async with Upstream(never_reads) as upstream:
        http = HttpClient(connect_timeout_s=2.0, read_timeout_s=0.3)
        try:
            async with asyncio.timeout(10):
                with pytest.raises(ReadTimeout, match="stopped reading"):
                    length = [("content-length", str(512 * MiB))]
                    await http.request("POST", upstream.url, length, large())
        finally:
            done.set()
            await http.aclose()


async def test_an_upstream_that_half_closes_is_never_reused() -> None:
    """After a complete response, or mid-body: the upstream sends its FIN but still reads."""
    mid_body = False

    async def half_closes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n" + (b"ok" if mid_body else b"okok")
        )
        writer.write_eof()
        await reader.read()

    async with Upstream(half_closes) as upstream:
        http = client(keep_spare=True)
        try:
            for done in (1, 2):
                assert await fetch(http, upstream.url) == (200, b"okok")
                # The FIN came after the response: once seen, the connection is closed (a
                # request sent before it arrives is sent again: tests/.../test_http1_retry).
                await upstream.until(lambda: upstream.closed == done)  # noqa: B023
            mid_body = True
            with pytest.raises(Broken, match="mid-response"):
                await fetch(http, upstream.url)
            await upstream.until(lambda: upstream.open <= 1)  # the spare, if any
        finally:
            await http.aclose()


async def test_an_upstream_resetting_every_connection_costs_at_most_two_connects_a_request() -> (
    None
):
    """Accepted and reset at once: each request fails typed; the spare opened beside it at
    most doubles the connects (measured: 75 for 50 requests one after another)."""

    async def resets(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
        raise ConnectionResetError

    async with Upstream(resets) as upstream:
        http = client(keep_spare=True)
        try:
            for _ in range(20):
                with pytest.raises(UpstreamError):
                    await fetch(http, upstream.url)
            assert upstream.accepted <= 40
        finally:
            await http.aclose()


async def test_endless_trailers_are_cut_short() -> None:
    """Trailers are held like a head (and not paused like a body): past `MAX_HEAD` bytes
    without a body byte the connection fails, before the read timeout."""
    sent = 0

    async def trailers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n")
        while sent < 64 * 1024 * 1024:
            writer.write(b"x-t: " + b"t" * 1000 + b"\r\n")
            sent += 1007
            await writer.drain()
        await reader.read()

    async with Upstream(trailers) as upstream:
        http = client()
        try:
            response = await http.request("POST", upstream.url, LENGTH0, body())
            async with asyncio.timeout(5):  # the read timeout is 10 s
                with pytest.raises(Broken, match="trailers"):
                    await response.read()
            response.close()
            await upstream.until(lambda: upstream.open == 0)
            assert sent < 16 * 1024 * 1024
        finally:
            await http.aclose()

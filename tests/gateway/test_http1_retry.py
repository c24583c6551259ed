"""The keep-alive race: a request sent on a pooled connection that its server closes as the
request goes out is sent once more on a fresh connection, and only then; sockets counted on
the server's side."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator

import pytest

from kinference.gateway import http1
from kinference.gateway.http1 import Broken, HttpClient
from kinference.gateway.http1_send import REPLAY_MAX
from tests.gateway.counting_upstream import OK, Clock, Upstream, body, read_request

Answer = tuple[int, bytes]


def client() -> HttpClient:
    return HttpClient(connect_timeout_s=2.0, read_timeout_s=10.0)


async def fetch(http: HttpClient, url: str, *chunks: bytes) -> Answer:
    length = [("content-length", str(sum(len(chunk) for chunk in chunks)))]
    response = await http.request("POST", url, length, body(*chunks))
    try:
        return response.status, await response.read()
    finally:
        response.close()


def one_response_then(close: str, *, first: bytes = OK, then: bytes = b"") -> Upstream:
    """Answers the first request on each connection with `first`; as the next one begins,
    sends `then` and closes (`close`: "fin") or resets ("reset") the connection, without
    having said `connection: close`: a keep-alive timer firing, an engine shutting down."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if first:
            await read_request(reader)
            writer.write(first)
            await writer.drain()
        await reader.read(1)  # the next request is on its way
        writer.write(then)
        await writer.drain()
        if close == "reset":
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort() if close == "reset" else writer.close()
        raise ConnectionResetError

    return Upstream(answer)


@pytest.mark.parametrize("close", ["fin", "reset"])
async def test_a_server_closing_each_connection_after_one_response_answers_every_request(
    close: str,
) -> None:
    """Each request after the first goes out on a pooled connection whose server closes it
    as the request arrives (before: 502): sent again on a fresh one, it is answered."""
    async with one_response_then(close) as upstream:
        http = client()
        try:
            for n in range(1, 11):
                assert await fetch(http, upstream.url, b'{"a":1}') == (200, b"ok")
                assert upstream.accepted == n  # the reused one failed, a fresh one answered
        finally:
            await http.aclose()
        await upstream.until(lambda: upstream.open == 0)


async def test_a_body_too_large_to_keep_is_not_sent_again() -> None:
    """A body over `REPLAY_MAX` is not held for a second try: the race fails it, typed."""
    half = b"x" * (REPLAY_MAX // 2 + 1)
    async with one_response_then("fin") as upstream:
        http = client()
        try:
            assert await fetch(http, upstream.url) == (200, b"ok")
            with pytest.raises(Broken):
                await fetch(http, upstream.url, half, half)
            assert upstream.accepted == 1
        finally:
            await http.aclose()
        await upstream.until(lambda: upstream.open == 0)


async def test_a_body_not_consumed_in_full_is_sent_again_with_its_rest() -> None:
    """The first chunks are kept, the rest comes from the iterator on the second try."""
    received: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if upstream.accepted == 1:
            received.append((await read_request(reader))[1])
            writer.write(OK)
            await writer.drain()
            await reader.read(1)
            writer.transport.abort()
            raise ConnectionResetError
        received.append((await read_request(reader))[1])
        writer.write(OK)
        await writer.drain()

    async def pieces() -> AsyncIterator[bytes]:
        yield b"abc"
        await upstream.until(lambda: upstream.closed == 1)  # reset before the rest is sent
        yield b"def"

    upstream = Upstream(answer)
    async with upstream:
        http = client()
        try:
            assert await fetch(http, upstream.url) == (200, b"ok")
            response = await http.request("POST", upstream.url, [("content-length", "6")], pieces())
            assert await response.read() == b"ok"
            response.close()
            assert received == [b"", b"abcdef"] and upstream.accepted == 2
        finally:
            await http.aclose()
        await upstream.until(lambda: upstream.open == 0)


async def test_a_fresh_connection_failing_is_not_retried() -> None:
    async with one_response_then("fin", first=b"") as upstream:
        http = client()
        try:
            with pytest.raises(Broken):
                await fetch(http, upstream.url, b"{}")
            assert upstream.accepted == 1
        finally:
            await http.aclose()
        await upstream.until(lambda: upstream.open == 0)


async def test_a_response_begun_then_cut_is_not_retried() -> None:
    """Once any response byte arrived the server saw the request: never sent twice."""
    async with one_response_then("fin", then=b"HTTP/1.1 200 OK\r\n") as upstream:
        http = client()
        try:
            assert await fetch(http, upstream.url) == (200, b"ok")
            with pytest.raises(Broken, match="mid-response"):
                await fetch(http, upstream.url, b"{}")
            assert upstream.accepted == 1
        finally:
            await http.aclose()
        await upstream.until(lambda: upstream.open == 0)


async def test_a_break_after_the_race_window_is_not_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pooled connection that breaks after `_RACE_S` (the server may have worked on the
    request: a provider dropping a long generation) is not sent again: the race is a round
    trip, a second try could be billed twice."""
    clock = Clock()
    monkeypatch.setattr(http1, "time", clock)
    moved = asyncio.Event()

    async def pieces() -> AsyncIterator[bytes]:
        clock.now += http1._RACE_S  # the request's body takes the whole window to come
        moved.set()
        yield b"{}"

    async with one_response_then("fin") as upstream:
        http = client()
        try:
            assert await fetch(http, upstream.url, b"{}") == (200, b"ok")
            with pytest.raises(Broken):
                await http.request("POST", upstream.url, [("content-length", "2")], pieces())
            assert moved.is_set() and upstream.accepted == 1
        finally:
            await http.aclose()
        await upstream.until(lambda: upstream.open == 0)

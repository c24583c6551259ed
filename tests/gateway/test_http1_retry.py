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


def client(replay_budget: int = 0) -> HttpClient:
    return HttpClient(connect_timeout_s=2.0, read_timeout_s=10.0, replay_budget=replay_budget)


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


async def test_a_large_body_is_held_out_of_the_budget_and_sent_again() -> None:
    """A body over `REPLAY_MAX` on a pooled connection is held out of the replay budget
    while the race lasts (before: 502), and the budget is given back."""
    half = b"x" * (REPLAY_MAX // 2 + 1)
    async with one_response_then("fin") as upstream:
        http = client(replay_budget=4 * REPLAY_MAX)
        try:
            assert await fetch(http, upstream.url) == (200, b"ok")
            assert await fetch(http, upstream.url, half, half) == (200, b"ok")
            assert upstream.accepted == 2 and http._replay.held == 0  # the pooled one lost the race
        finally:
            await http.aclose()
        await upstream.until(lambda: upstream.open == 0)


async def test_a_large_body_without_room_in_the_budget_goes_out_on_a_fresh_connection() -> None:
    """No budget: a large body never takes a pooled connection (one cannot lose the race)."""
    half = b"x" * (REPLAY_MAX // 2 + 1)
    async with one_response_then("fin") as upstream:
        http = client()
        try:
            assert await fetch(http, upstream.url) == (200, b"ok")
            assert await fetch(http, upstream.url, half, half) == (200, b"ok")
            assert upstream.accepted == 2
            assert await fetch(http, upstream.url, b"{}") == (200, b"ok")  # a small one: pooled
            assert upstream.accepted == 3  # it lost the race on a pooled one, sent again
        finally:
            await http.aclose()
        await upstream.until(lambda: upstream.open == 0)


async def test_the_budget_bounds_the_large_bodies_held_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two large bodies at once with room for one: the second takes a fresh connection
    instead of a pooled one; what was held is given back at the response head."""
    monkeypatch.setattr(http1, "_RACE_S", 600.0)  # no timer lets go during the test
    big = b"x" * (REPLAY_MAX + 1)
    async with Upstream() as upstream:
        http = client(replay_budget=len(big))
        try:
            warm = [fetch(http, upstream.url, b"{}") for _ in range(2)]
            assert await asyncio.gather(*warm) == [(200, b"ok")] * 2
            assert upstream.accepted == 2  # both pooled now
            upstream.gate.clear()
            first = asyncio.ensure_future(fetch(http, upstream.url, big))
            await upstream.until(lambda: upstream.requests == 3)
            assert http._replay.held == len(big) and upstream.accepted == 2
            second = asyncio.ensure_future(fetch(http, upstream.url, big))
            await upstream.until(lambda: upstream.requests == 4)
            assert http._replay.held == len(big) and upstream.accepted == 3
            upstream.gate.set()
            assert await asyncio.gather(first, second) == [(200, b"ok")] * 2
            assert http._replay.held == 0
        finally:
            await http.aclose()
        await upstream.until(lambda: upstream.open == 0)


async def test_a_large_body_is_let_go_when_the_race_is_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A large body is held for `_RACE_S`, not until a late response head."""
    monkeypatch.setattr(http1, "_RACE_S", 0.0)  # over as soon as the request went out
    big = b"x" * (REPLAY_MAX + 1)
    async with Upstream() as upstream:
        http = client(replay_budget=len(big))
        try:
            assert await fetch(http, upstream.url, b"{}") == (200, b"ok")
            upstream.gate.clear()
            late = asyncio.ensure_future(fetch(http, upstream.url, big))
            await upstream.until(lambda: upstream.requests == 2)
            assert upstream.accepted == 1 and http._replay.held == 0  # pooled, and let go
            upstream.gate.set()
            assert await late == (200, b"ok")
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

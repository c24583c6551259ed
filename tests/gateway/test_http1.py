"""The upstream client against hand-written HTTP/1.1 servers: framing, reuse, failures."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from kinference.gateway import http1
from kinference.gateway.http1 import Broken, ConnectFailed, HttpClient, ReadTimeout
from tests.gateway.counting_upstream import body, read_request
from tests.tls_builds import count_default_contexts, failing_handshakes

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def serve(handler: Handler) -> tuple[asyncio.Server, str]:
    """A server running `handler` per connection; every connection is closed after it."""

    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(closing, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


def client(read_timeout_s: float = 5.0) -> HttpClient:
    return HttpClient(connect_timeout_s=2.0, read_timeout_s=read_timeout_s)


async def test_chunked_and_length_framed_responses_reuse_one_connection() -> None:
    connections = 0
    seen: list[tuple[bytes, bytes]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        for index in range(3):
            seen.append(await read_request(reader))
            if index % 2:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")
            else:
                writer.write(
                    b"HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\nx-a: 1\r\n\r\n"
                    b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
                )
            await writer.drain()
        writer.close()

    server, url = await serve(handler)
    http = client()
    try:
        bodies = []
        for _ in range(3):
            headers = [("content-length", "4")]
            response = await http.request("POST", f"{url}/v1/x?q=1", headers, body(b"ab", b"cd"))
            bodies.append((response.status, await response.read(), response.header("x-a")))
            response.close()
        assert bodies == [(201, b"abcde", "1"), (200, b"hello", ""), (201, b"abcde", "1")]
        assert connections == 1  # keep-alive: one connection for the three
        head, sent = seen[0]
        assert head.startswith(b"POST /v1/x?q=1 HTTP/1.1\r\nhost: 127.0.0.1:") and sent == b"abcd"
    finally:
        await http.aclose()
        server.close()


async def test_close_delimited_body_and_connection_close_are_not_reused() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end")
        await writer.drain()
        writer.close()

    server, url = await serve(handler)
    http = client()
    try:
        for _ in range(2):
            response = await http.request("POST", url, [("content-length", "0")], body())
            assert await response.read() == b"until the end"
            response.close()
        assert connections == 2
    finally:
        await http.aclose()
        server.close()


async def test_a_connection_closed_while_idle_is_not_used_again() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()  # no connection: close header, yet it goes away

    server, url = await serve(handler)
    http = client()
    try:
        for _ in range(3):
            response = await http.request("POST", url, [("content-length", "0")], body())
            assert await response.read() == b"ok"
            response.close()
            await asyncio.sleep(0.05)  # let the server's close arrive
    finally:
        await http.aclose()
        server.close()


async def test_idle_connections_are_closed_without_another_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An origin nobody asks again (an engine scaled away) does not keep its idle sockets."""
    monkeypatch.setattr(http1, "_IDLE_S", 0.05)
    hung_up = asyncio.Event()

    async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        await reader.read()  # the server never closes: only the client's sweep can
        hung_up.set()

    server, url = await serve(keep_alive)
    http = client()
    try:
        response = await http.request("POST", url, [("content-length", "0")], body())
        assert await response.read() == b"ok"
        response.close()  # back in the pool, idle
        async with asyncio.timeout(5):
            await hung_up.wait()
    finally:
        await http.aclose()
        server.close()


async def test_failures_are_typed() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await reader.read()  # until the client gives up and closes

    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
        await writer.drain()
        writer.close()

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SMTP ready\r\n\r\n")
        await writer.drain()
        await reader.read()

    http = client(read_timeout_s=0.2)
    try:
        with pytest.raises(ConnectFailed):
            await http.request("POST", "http://127.0.0.1:9", [("content-length", "0")], body())
        server, url = await serve(silent)
        with pytest.raises(ReadTimeout):
            await http.request("POST", url, [("content-length", "0")], body())
        server.close()
        server, url = await serve(cut)
        response = await http.request("POST", url, [("content-length", "0")], body())
        with pytest.raises(Broken):
            await response.read()
        response.close()
        server.close()
        server, url = await serve(garbage)
        with pytest.raises(Broken):
            await http.request("POST", url, [("content-length", "0")], body())
        server.close()
        with pytest.raises(Broken, match="line break"):  # never a smuggled second request
            await http.request("POST", url, [("x-a", "1\r\nGET / HTTP/1.1")], body())
    finally:
        await http.aclose()


async def test_https_builds_the_default_tls_context_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building a default context loads the CA bundle (~20 ms on the loop): once per client."""
    built = count_default_contexts(monkeypatch)
    http = client()
    try:
        async with failing_handshakes() as port:
            for _ in range(3):
                with pytest.raises(ConnectFailed):
                    await http.request("POST", f"https://127.0.0.1:{port}/", [], body())
    finally:
        await http.aclose()
    assert len(built) == 1


async def test_a_slow_reader_pauses_the_upstream() -> None:
    sent = asyncio.Event()
    total = 8 * 1024 * 1024

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(f"HTTP/1.1 200 OK\r\ncontent-length: {total}\r\n\r\n".encode())
        for _ in range(total // 65536):
            writer.write(b"x" * 65536)
            await writer.drain()
        sent.set()

    server, url = await serve(handler)
    http = client()
    try:
        response = await http.request("POST", url, [("content-length", "0")], body())
        await asyncio.sleep(0.2)
        assert not sent.is_set()  # the client stopped reading: the server is held back
        received = sum([len(chunk) async for chunk in response.chunks()])
        assert received == total
        response.close()
    finally:
        await http.aclose()
        server.close()


async def test_an_upstream_silent_mid_body_times_out_and_is_dropped() -> None:
    async def stalls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
        await writer.drain()
        await reader.read()  # then nothing more, until the client drops the connection

    server, url = await serve(stalls)
    http = client(read_timeout_s=0.2)
    try:
        response = await http.request("POST", url, [("content-length", "0")], body())
        chunks = response.chunks()
        assert await anext(chunks) == b"abc"
        with pytest.raises(ReadTimeout, match="silent"):
            await anext(chunks)
        response.close()  # an unfinished response: its connection is not pooled
        assert not http._idle.get(("http", "127.0.0.1", server.sockets[0].getsockname()[1]))
    finally:
        await http.aclose()
        server.close()


async def test_a_reused_connection_still_times_out_a_silent_upstream() -> None:
    """The read deadline is one timer per connection: after a first response on it (whose
    timer is still pending), a second response that stalls mid-body still times out."""

    async def second_stalls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
        await writer.drain()
        await reader.read()

    server, url = await serve(second_stalls)
    http = client(read_timeout_s=0.2)
    try:
        first = await http.request("POST", url, [("content-length", "0")], body())
        assert await first.read() == b"ok"
        first.close()
        second = await http.request("POST", url, [("content-length", "0")], body())
        chunks = second.chunks()
        assert await anext(chunks) == b"abc"
        with pytest.raises(ReadTimeout, match="silent"):
            await anext(chunks)
        second.close()
    finally:
        await http.aclose()
        server.close()


async def test_a_spare_connection_is_ready_for_the_next_request() -> None:
    opened: list[asyncio.Event] = [asyncio.Event() for _ in range(3)]
    served_on: list[int] = []
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        number = connections
        opened[min(number, 3) - 1].set()
        while True:
            await read_request(reader)
            served_on.append(number)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()

    server, url = await serve(handler)
    http = HttpClient(connect_timeout_s=2.0, read_timeout_s=5.0, keep_spare=True)
    try:
        warm = await http.request("POST", url, [("content-length", "0")], body())
        assert await warm.read() == b"ok"  # a first request: the origin was quiet, no spare
        warm.close()
        assert not http._spares and connections == 1
        first = await http.request("POST", url, [("content-length", "0")], body())
        await asyncio.gather(*http._spares.values())  # the spare, if still connecting
        await opened[1].wait()  # the pool was left empty: a spare was opened beside it
        second = await http.request("POST", url, [("content-length", "0")], body())
        assert served_on == [1, 1, 2]  # the second went out on the spare, the first still busy
        for response in (first, second):
            assert await response.read() == b"ok"
            response.close()
    finally:
        await http.aclose()
        server.close()


async def test_without_keep_spare_no_connection_is_opened_ahead() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()

    server, url = await serve(handler)
    http = client()
    try:
        for _ in range(2):
            response = await http.request("POST", url, [("content-length", "0")], body())
            assert await response.read() == b"ok"
            response.close()
        assert connections == 1
    finally:
        await http.aclose()
        server.close()

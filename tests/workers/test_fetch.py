"""LeanPages against raw HTTP/1.1 servers: framing, keep-alive, closed idles, failures."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from kinference.workers.fetch import FetchError, LeanPages, PageTooLarge
from tests.tls_builds import count_default_contexts, failing_handshakes

ACCEPT = "text/plain"
Reply = Callable[[int], bytes]  # request number on its connection -> raw response


class RawServer:
    """Answers every request with `reply(n)`; counts connections; may close after each."""

    def __init__(self, reply: Reply, close_after_each: bool = False) -> None:
        self.reply = reply
        self.close_after_each = close_after_each
        self.connections = 0
        self.requests: list[bytes] = []
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/metrics"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        try:
            for n in range(1, 1_000):
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests.append(head)
                writer.write(self.reply(n))
                await writer.drain()
                if self.close_after_each:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self._writers.discard(writer)

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()


def ok(body: bytes) -> Reply:
    return lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


@pytest.fixture
async def pages() -> AsyncIterator[LeanPages]:
    client = LeanPages()
    yield client
    await client.aclose()


async def serve(reply: Reply, *, close_after_each: bool = False) -> tuple[RawServer, str]:
    server = RawServer(reply, close_after_each)
    return server, await server.start()


async def test_gets_reuse_one_keep_alive_connection(pages: LeanPages) -> None:
    server, url = await serve(ok(b"vllm:num_requests_running 3\n"))
    try:
        for _ in range(5):
            assert await pages.get(url, ACCEPT, 1024) == b"vllm:num_requests_running 3\n"
        assert server.connections == 1
        assert b"GET /metrics HTTP/1.1" in server.requests[0]
        assert b"accept: text/plain" in server.requests[0].lower()
    finally:
        await server.close()


async def test_chunked_bodies_are_reassembled(pages: LeanPages) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    )
    server, url = await serve(lambda n: chunked)
    try:
        assert await pages.get(url, ACCEPT, 1024) == b"hello world"
        assert await pages.get(url, ACCEPT, 1024) == b"hello world"
        assert server.connections == 1
    finally:
        await server.close()


async def test_an_idle_connection_the_engine_closed_is_replaced_transparently(
    pages: LeanPages,
) -> None:
    server, url = await serve(ok(b"x 1\n"), close_after_each=True)
    try:
        for _ in range(3):
            assert await pages.get(url, ACCEPT, 1024) == b"x 1\n"
        assert server.connections == 3
    finally:
        await server.close()


async def test_an_error_status_raises_and_keeps_the_connection(pages: LeanPages) -> None:
    server, url = await serve(
        lambda n: (
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nno\n"
            if n == 1
            else ok(b"y 2\n")(n)
        )
    )
    try:
        with pytest.raises(FetchError, match="HTTP 404"):
            await pages.get(url, ACCEPT, 1024)
        assert await pages.get(url, ACCEPT, 1024) == b"y 2\n"
        assert server.connections == 1
    finally:
        await server.close()


async def test_a_page_over_the_limit_raises_and_drops_the_connection(pages: LeanPages) -> None:
    server, url = await serve(ok(b"z" * 5000))
    try:
        with pytest.raises(PageTooLarge):
            await pages.get(url, ACCEPT, 4096)
        assert await pages.get(url, ACCEPT, 10_000) == b"z" * 5000
        assert server.connections == 2
    finally:
        await server.close()


async def test_garbage_and_refused_connections_raise_fetch_or_os_errors(
    pages: LeanPages,
) -> None:
    server, url = await serve(lambda n: b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
    try:
        with pytest.raises(FetchError):
            await pages.get(url, ACCEPT, 1024)
    finally:
        await server.close()
    with pytest.raises(OSError):
        await pages.get(url, ACCEPT, 1024)  # nothing listens there any more


async def test_https_pages_build_the_default_tls_context_once(
    pages: LeanPages, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A default context loads the CA bundle (~20 ms on the loop); an engine whose TLS keeps
    failing is reconnected at every scrape, which must not pay that every time."""
    built = count_default_contexts(monkeypatch)
    async with failing_handshakes() as port:
        for _ in range(3):
            with pytest.raises(OSError):
                await pages.get(f"https://127.0.0.1:{port}/metrics", ACCEPT, 1024)
    assert len(built) == 1


async def test_a_cancelled_get_leaves_no_half_read_connection(pages: LeanPages) -> None:
    def reply(n: int) -> bytes:
        return b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial"

    server, url = await serve(reply)
    try:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await pages.get(url, ACCEPT, 1024)
        with pytest.raises(TimeoutError):  # a fresh connection, not the half-read one
            async with asyncio.timeout(0.2):
                await pages.get(url, ACCEPT, 1024)
        assert server.connections == 2
    finally:
        await server.close()

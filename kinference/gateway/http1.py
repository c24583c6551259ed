"""The gateway's upstream client: keep-alive HTTP/1.1 over asyncio protocols, httptools' parser.

httpx cost the gateway about a third of its CPU per request (anyio streams, connection-pool
state machines, header models); a relay needs far less: one request at a time per
connection, a streamed body of known length, the response head and then its body as it
comes, with backpressure both ways. The response framing (chunked, content-length, close
delimited) is llhttp's, through httptools (uvicorn's parser, already in the `gateway` extra).

`HttpClient.request` returns once the response head has arrived; iterate `Response.chunks()`
and always call `Response.close()` (it puts a cleanly finished connection back in the pool,
or drops it).
"""

from __future__ import annotations

import asyncio
import collections
import socket
import ssl
import time
from collections.abc import AsyncIterable, AsyncIterator
from typing import cast
from urllib.parse import urlsplit

import httptools

_IDLE_S = 4.0  # an idle pooled connection older than this (seconds) is closed, not reused
_MAX_IDLE_PER_ORIGIN = 64
_JOIN_BELOW = 64 * 1024  # a first body chunk up to this many bytes is sent with the head
_READ_HIGH = 256 * 1024  # buffered response bytes at which the socket stops being read


class UpstreamError(Exception):
    """The upstream could not be used: connection, protocol or timeout."""


class ConnectFailed(UpstreamError):
    """No connection (refused, unreachable, TLS failure, DNS); nothing was sent."""


class ConnectTimeout(ConnectFailed):
    """The connection was not established in time."""


class ReadTimeout(UpstreamError):
    """The upstream went silent for longer than the read timeout."""


class Broken(UpstreamError):
    """The connection failed mid-exchange or the upstream did not speak HTTP/1.1."""


Origin = tuple[str, str, int]  # scheme, host, port


class _Conn(asyncio.Protocol):
    """One connection: its transport, parser and the response being received."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle_since = 0.0
        self._can_write = asyncio.Event()
        self._can_write.set()
        # The read deadline: one timer per connection, re-armed only when it fires early.
        self._deadline = 0.0  # loop time by which the awaited head or bytes must arrive
        self._awaited: asyncio.Future[None] | None = None  # what the deadline applies to
        self._what = ""
        self._timer: asyncio.TimerHandle | None = None
        self._reset()

    def _reset(self) -> None:
        self.head: asyncio.Future[None] = self.loop.create_future()
        self.headers: list[tuple[str, str]] = []
        self.body: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.complete = False
        self.keep_alive = False
        self.error: UpstreamError | None = None
        self._wake: asyncio.Future[None] | None = None
        self._paused = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(Broken(f"not HTTP/1.1: {exc}"))
            self.drop()

    def eof_received(self) -> bool:
        self._ended()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._ended()
        self._can_write.set()
        self._stop_timer()

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.decode("latin-1").lower(), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        # Read here: llhttp forgets it once the message is complete.
        self.keep_alive = self.parser.should_keep_alive()
        if not self.head.done():
            self.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self.buffered += len(body)
        if self.buffered > _READ_HIGH and self.transport is not None and not self._paused:
            self._paused = True
            self.transport.pause_reading()
        self._notify()

    def on_message_complete(self) -> None:
        self.complete = True
        self._notify()

    # the exchange
    def _ended(self) -> None:
        if self.complete:
            return
        if self.head.done() and not _framed(self.headers):
            self.complete = True  # a close-delimited body ends with the connection
        else:
            self._fail(Broken("the upstream closed the connection mid-response"))
        self._notify()

    def _fail(self, error: UpstreamError) -> None:
        if self.error is None:
            self.error = error
        if not self.head.done():
            self.head.set_exception(error)
            self.head.exception()  # retrieved: a request that gave up must not warn
        self._notify()

    def _notify(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def next_body(self, timeout_s: float) -> bytes | None:
        """The next body bytes, or None at the end; raises `UpstreamError`."""
        while not self.body:
            if self.complete:
                return None
            if self.error is not None:
                raise self.error
            waiter = self._wake = self.loop.create_future()
            self.expect(waiter, timeout_s, "the upstream went silent")
            try:
                await waiter  # raises ReadTimeout when the deadline passes first
            finally:
                self._awaited = None
                self._wake = None
        # Everything already here goes out as one piece: one client write, not one per read.
        data = self.body.popleft() if len(self.body) == 1 else b"".join(self._drain())
        self.buffered -= len(data)
        if self._paused and self.buffered <= _READ_HIGH // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    def _drain(self) -> list[bytes]:
        pieces = list(self.body)
        self.body.clear()
        return pieces

    @property
    def drained(self) -> bool:
        """The whole response has arrived and been handed out."""
        return self.complete and not self.body

    async def write(self, data: bytes | memoryview) -> None:
        if self.closed or self.transport is None:
            raise Broken("the upstream closed the connection")
        self.transport.write(data)
        if not self._can_write.is_set():
            await self._can_write.wait()

    def reusable(self) -> bool:
        return (
            self.complete
            and self.error is None
            and not self.closed
            and not self.body
            and self.keep_alive
        )

    def recycle(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self._reset()
        self.idle_since = time.monotonic()

    def drop(self) -> None:
        self.closed = True
        self._stop_timer()
        if self.transport is not None:
            self.transport.abort()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def expect(self, waiter: asyncio.Future[None], timeout_s: float, what: str) -> None:
        """Fail `waiter` with ReadTimeout unless it is done within `timeout_s`.

        Cheaper than a timer per wait (asyncio.timeout, or call_later and cancel: each
        allocates a timer and moves it in the loop's heap, several times per response): the
        connection keeps one timer, which only moves when it fires before the deadline.
        """
        self._awaited, self._what = waiter, what
        self._deadline = self.loop.time() + timeout_s
        if self._timer is None:
            self._timer = self.loop.call_at(self._deadline, self._check_deadline)

    def _check_deadline(self) -> None:
        self._timer = None
        waiter = self._awaited
        if waiter is None or waiter.done() or self.closed:
            return  # nothing awaited now: the next wait arms a timer again
        if self.loop.time() >= self._deadline:
            self._awaited = None
            waiter.set_exception(ReadTimeout(self._what))
            waiter.exception()  # retrieved: a request that gave up must not warn
        else:
            self._timer = self.loop.call_at(self._deadline, self._check_deadline)


def _framed(headers: list[tuple[str, str]]) -> bool:
    return any(name in ("content-length", "transfer-encoding") for name, _ in headers)


class Response:
    """An upstream response whose head has arrived; its body is read with `chunks()`."""

    def __init__(self, conn: _Conn, client: HttpClient, read_timeout_s: float) -> None:
        self._conn = conn
        self._client = client
        self._read_timeout_s = read_timeout_s
        self.status: int = conn.parser.get_status_code()
        self.headers = conn.headers
        self._closed = False

    def header(self, name: str) -> str:
        """The first value of header `name` (lower-case), or ""."""
        for key, value in self.headers:
            if key == name:
                return value
        return ""

    @property
    def drained(self) -> bool:
        """Nothing more will come: the body is complete and all of it was handed out."""
        return self._conn.drained

    async def chunks(self) -> AsyncIterator[bytes]:
        while (data := await self._conn.next_body(self._read_timeout_s)) is not None:
            yield data

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    def close(self) -> None:
        """Done with the response: a finished connection goes back to the pool."""
        if self._closed:
            return
        self._closed = True
        self._client.release(self._conn)


class HttpClient:
    """Keep-alive connections per origin; no proxies, no cookies, no redirects."""

    def __init__(
        self,
        *,
        connect_timeout_s: float,
        read_timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._ssl = ssl_context
        self._idle: dict[Origin, list[_Conn]] = {}

    async def request(
        self,
        method: str,
        url: str,
        headers: list[tuple[str, str]],
        body: AsyncIterable[bytes | memoryview],
    ) -> Response:
        """Send the request (the caller sets `content-length`); returns at the response head."""
        origin, target = _split(url)
        head: bytes | None = _head(method, target, origin, headers)  # checked before connecting
        conn = self._pooled(origin) or await self._connect(origin)
        try:
            async for chunk in body:
                data = chunk
                if head is not None:  # the head and a small first chunk: one write
                    if len(chunk) <= _JOIN_BELOW:
                        data = b"".join((head, chunk))
                    else:
                        await conn.write(head)
                    head = None
                await conn.write(data)
            if head is not None:
                await conn.write(head)
            # Awaited as it is (no shield): a cancelled wait drops the connection below, and
            # the task wakes in the loop turn the head arrives in, not one later.
            conn.expect(conn.head, self.read_timeout_s, "no response head in time")
            await conn.head  # raises ReadTimeout when the deadline passes first
        except BaseException:
            conn.drop()
            raise
        return Response(conn, self, self.read_timeout_s)

    def _pooled(self, origin: Origin) -> _Conn | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < _IDLE_S:
                return conn
            conn.drop()
        return None

    async def _connect(self, origin: Origin) -> _Conn:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        tls = (self._ssl or ssl.create_default_context()) if scheme == "https" else None
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _transport, conn = await loop.create_connection(
                    lambda: _Conn(origin),
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls else None,
                )
        except TimeoutError:
            raise ConnectTimeout(f"connect to {host}:{port} timed out") from None
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(f"connect to {host}:{port}: {exc}") from None
        return conn

    def release(self, conn: _Conn) -> None:
        if not conn.reusable():
            conn.drop()
            return
        idle = self._idle.setdefault(conn.origin, [])
        if len(idle) >= _MAX_IDLE_PER_ORIGIN:
            conn.drop()
            return
        conn.recycle()
        idle.append(conn)

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.drop()
        self._idle.clear()


def _split(url: str) -> tuple[Origin, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConnectFailed(f"not an http(s) URL: {url[:200]}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = parts.path or "/"
    if parts.query:
        target = f"{target}?{parts.query}"
    return (parts.scheme, parts.hostname, port), target


def _head(method: str, target: str, origin: Origin, headers: list[tuple[str, str]]) -> bytes:
    scheme, host, port = origin
    default = 443 if scheme == "https" else 80
    authority = host if port == default else f"{host}:{port}"
    if ":" in host:  # IPv6 literal
        authority = f"[{host}]" if port == default else f"[{host}]:{port}"
    lines = [f"{method} {target} HTTP/1.1", f"host: {authority}"]
    for name, value in headers:
        if "\r" in value or "\n" in value:
            raise Broken(f"header {name} has a line break")  # never smuggle a request
        lines.append(f"{name}: {value}")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1", "replace")

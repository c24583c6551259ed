"""One upstream HTTP/1.1 connection: an asyncio protocol feeding httptools' parser (llhttp),
and how an upstream exchange fails (`UpstreamError` and its kinds).

`Conn` holds the transport, the response being received (head, buffered body, completion),
the read deadline (one timer per connection) and the backpressure both ways: reading pauses
above `READ_HIGH` buffered bytes, writing waits while the transport is paused (at most the
read timeout without progress). The client (kinference.gateway.http1) pools it.

Only the response to the request sent is ever handed out: interim responses (1xx: `100
Continue`, `103 Early Hints`) are skipped, and a message that begins while none is awaited
(on an idle connection, or after the response completed) fails the connection, which is
dropped, never reused: it would answer the next request with bytes meant for no one.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import time
from collections.abc import Callable
from typing import cast

import httptools

READ_HIGH = 256 * 1024  # buffered response bytes at which the socket stops being read
# Bytes received in a row without a body byte (a head, interim responses included, or
# trailers) past which the upstream is broken: the parser holds them until they end, the
# body's pause does not apply, the read deadline alone would let them grow for 600 s.
MAX_HEAD = 64 * 1024
_FRAMED = ("content-length", "transfer-encoding")  # a body not ended by the connection's close


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


class Conn(asyncio.Protocol):
    """One connection: its transport, parser and the response being received."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle_since = 0.0
        self._writable: asyncio.Future[None] | None = None  # while the transport is paused
        # The read deadline: one timer per connection, re-armed only when it fires early.
        self._deadline = 0.0  # loop time by which the awaited head or bytes must arrive
        self._awaited: asyncio.Future[None] | None = None  # what the deadline applies to
        self._what, self._wait_s = "", 0.0  # the wait under way: its name, its read timeout
        self._timer: asyncio.TimerHandle | None = None
        # While set (http1_response's `pipe`), body bytes go to it from `data_received`, not
        # to a waiting task; it answers False when it stops taking them.
        self.sink: Callable[[bytes], bool] | None = None
        self._reset()

    def _reset(self) -> None:
        self.head: asyncio.Future[None] = self.loop.create_future()
        self.headers: list[tuple[str, str]] = []
        self.body: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self._body_bytes = 0  # received in this response so far
        self._no_body = 0  # bytes received since the last body bytes
        self.complete = False
        self.keep_alive = False
        self.asked = False  # a request was sent: its response may begin
        self._interim = False  # the message being received is a 1xx before the response
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
        body_before = self._body_bytes
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(Broken(f"not HTTP/1.1: {exc}"))
            self.drop()
        except httptools.HttpParserUpgrade:  # a 101 nobody asked for
            self._fail(Broken("the upstream switched protocols"))
            self.drop()
        if self.sink is not None and self.body and not self.complete and self.error is None:
            self._deadline = self.loop.time() + self._wait_s  # bytes came: the wait goes on
            if not self.sink(self._take()):  # it kept what it could not pass on:
                self.sink = None  # the waiting task takes over
                self._notify()
        self._no_body = 0 if self._body_bytes > body_before else self._no_body + len(data)
        if self._no_body > MAX_HEAD and not self.closed:
            what = "framing (trailers, chunk lines)" if self.head.done() else "head"
            self._fail(Broken(f"the response {what} passed {MAX_HEAD} bytes"))
            self.drop()

    def eof_received(self) -> bool:
        self._ended()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._ended()
        self.resume_writing()
        self._stop_timer()

    def pause_writing(self) -> None:
        self._writable = self.loop.create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    # httptools callbacks
    def on_message_begin(self) -> None:
        if not self.asked or self.complete:
            self._fail(Broken("the upstream sent a response nobody asked for"))
            raise Broken("unsolicited")  # stops the parser; data_received drops the connection

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.decode("latin-1").lower(), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if not 100 <= status <= 599:  # RFC 9110's range (before: relayed, and uvicorn failed)
            self._fail(Broken(f"the upstream answered status {status}"))
            raise Broken("status out of range")  # stops the parser, as for unsolicited bytes
        if status < 200:  # interim (a 101 fails: upgrade, below)
            self._interim = True
            self.headers.clear()
            return
        # Read here: llhttp forgets it once the message is complete.
        self.keep_alive = self.parser.should_keep_alive()
        if not self.head.done():
            self.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self.buffered += len(body)
        self._body_bytes += len(body)
        if self.buffered > READ_HIGH and self.transport is not None and not self._paused:
            self._paused = True
            self.transport.pause_reading()
        if self.sink is None:  # else `data_received` hands them on once the read is parsed
            self._notify()

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        self.complete = True
        self._notify()

    # the exchange
    def _ended(self) -> None:
        if self.complete:
            return
        if self.head.done() and not any(n in _FRAMED for n, _ in self.headers):
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
            await self.wait(timeout_s)
        return self._take()

    async def wait(self, timeout_s: float) -> None:
        """Until bytes, the end, a failure or the sink stopping; ReadTimeout past `timeout_s`."""
        waiter = self._wake = self.loop.create_future()
        self._wait_s = timeout_s
        self.expect(waiter, timeout_s, "the upstream went silent")
        try:
            await waiter  # raises ReadTimeout when the deadline passes first
        finally:
            self._awaited = None
            self._wake = None

    def _take(self) -> bytes:
        # Everything already here goes out as one piece: one client write, not one per read.
        data = self.body.popleft() if len(self.body) == 1 else b"".join(self.body)
        self.body.clear()
        self.buffered -= len(data)
        if self._paused and self.buffered <= READ_HIGH // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    @property
    def drained(self) -> bool:
        """The whole response has arrived and been handed out."""
        return self.complete and not self.body

    async def write(self, data: bytes | memoryview, timeout_s: float) -> None:
        """Send `data`; while the upstream's socket is full, wait at most `timeout_s` for it
        to read on (raises ReadTimeout: an upstream that stopped reading the request)."""
        if self.closed or self.transport is None:
            raise Broken("the upstream closed the connection")
        self.transport.write(data)
        if (waiter := self._writable) is not None:
            self.expect(waiter, timeout_s, "the upstream stopped reading the request")
            try:
                await waiter
            finally:
                self._awaited = None

    @property
    def silent(self) -> bool:
        """Nothing of a response arrived (since the connection was made or recycled)."""
        return self._body_bytes == 0 and self._no_body == 0

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
        """Fail `waiter` with ReadTimeout unless it is done within `timeout_s`. One timer per
        connection, moved only when it fires before the deadline: cheaper than a timer per
        wait (each allocated and moved in the loop's heap, several times per response)."""
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

"""The gateway's upstream client: keep-alive HTTP/1.1 over asyncio protocols, httptools' parser.

httpx cost the gateway about a third of its CPU per request (anyio streams, connection-pool
state machines, header models); a relay needs far less: one request at a time per
connection, a streamed body of known length, the response head and then its body as it
comes, with backpressure both ways. The response framing (chunked, content-length, close
delimited) is llhttp's, through httptools (uvicorn's parser, already in the `gateway` extra).

`HttpClient.request` returns once the response head has arrived; iterate `Response.chunks()`
and always call `Response.close()` (it puts a cleanly finished connection back in the pool,
or drops it). One connection, and the failures (re-exported here), are in
kinference.gateway.http1_conn; one request's writes in kinference.gateway.http1_send.

A request sent on a pooled connection that fails before any response byte (the server
closed it as the request went out: an engine shutting down, or its keep-alive timer firing)
is sent once more on a fresh connection when its body is all still at hand and the break
came within `_RACE_S` of taking the connection; never after a fresh connection failed, after
any response byte or after a longer wait (the server may have worked on it: a POST is not
idempotent). A body up to `http1_send.REPLAY_MAX` bytes is always at hand; a larger one is
held for at most `_RACE_S` out of the client's `replay_budget`, or, without room there,
goes out on a fresh connection, which cannot lose the race (as hyper and Envoy, a reused
connection is retried only with the request still in hand).

With `keep_spare` (the gateway's), a request that leaves its origin's pool without an idle
connection has one more opened in the background when the origin is busy (asked within
`_IDLE_S` before this request): when requests in flight climb (a burst, streams piling up),
the next request finds a connection ready instead of paying the connect (its loop turn, the
socket and the server's accept: 0.2 ms at the median and over 1 ms at the 90th percentile on
the gateway's busy loop, docs/benchmarks.md). An origin asked less often would never use
it (it is closed once idle for `_IDLE_S`, like any other). One such connect at a time per
origin.

While any connection is idle or any origin was asked lately, a sweep every `_IDLE_S` closes
the connections idle longer and forgets origins with none left and not asked since: an
engine scaled away or a provider no longer asked would otherwise keep its idle sockets (up
to `_MAX_IDLE_PER_ORIGIN`) until its server closed them.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterable

from kinference.gateway.http1_conn import (
    Broken,
    Conn,
    ConnectFailed,
    ConnectTimeout,
    Origin,
    ReadTimeout,
    UpstreamError,
)
from kinference.gateway.http1_response import Response
from kinference.gateway.http1_send import (
    REPLAY_MAX,
    Chunk,
    ReplayBudget,
    Sent,
    declared_length,
    request_head,
    send,
    split,
)

__all__ = [
    "Broken",
    "ConnectFailed",
    "ConnectTimeout",
    "HttpClient",
    "ReadTimeout",
    "Response",
    "UpstreamError",
]

_IDLE_S = 4.0  # an idle pooled connection older than this (seconds) is closed, not reused
_MAX_IDLE_PER_ORIGIN = 64
# A pooled connection that breaks within this many seconds of being taken, before any
# response byte, lost the keep-alive race (the server's close crosses the request within a
# round trip) and the request goes again; one that breaks later may have been worked on (a
# provider dropping a long non-streamed generation): sent again it could be billed twice.
_RACE_S = 1.0


class HttpClient:
    """Keep-alive connections per origin; no proxies, no cookies, no redirects."""

    def __init__(
        self,
        *,
        connect_timeout_s: float,
        read_timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
        keep_spare: bool = False,
        replay_budget: int = 0,
    ) -> None:
        """`keep_spare`: open a connection ahead when a request leaves none idle (above);
        `replay_budget`: the most bytes of bodies over `REPLAY_MAX` held at once so that
        they can be sent again (above; the gateway's is its `max_body_bytes`)."""
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._replay = ReplayBudget(replay_budget)
        self._ssl = ssl_context
        self._keep_spare = keep_spare
        self._idle: dict[Origin, list[Conn]] = {}
        self._spares: dict[Origin, asyncio.Task[None]] = {}  # a spare being opened, by origin
        self._asked: dict[Origin, float] = {}  # when each origin was last asked (keep_spare)
        self._sweep: asyncio.TimerHandle | None = None  # armed while any is idle or asked
        self._closed = False  # by aclose: nothing is pooled or opened ahead from then on

    async def request(
        self,
        method: str,
        url: str,
        headers: list[tuple[str, str]],
        body: AsyncIterable[Chunk],
    ) -> Response:
        """Send the request (the caller sets `content-length`); returns at the response head."""
        origin, target = split(url)
        head = request_head(method, target, origin, headers)  # checked before connecting
        if self._closed:
            raise ConnectFailed("the upstream client is closed")
        now = time.monotonic()
        length = declared_length(headers)
        conn = self._pooled(origin, now) if self._replay.has_room(length) else None
        reused = conn is not None
        if conn is None:  # fresh: it cannot lose the race, a large body need not be held
            conn = await self._connect(origin)
        if self._keep_spare:
            self._spare(origin, now)
        held = reused and length > REPLAY_MAX  # out of the budget, while the race lasts
        sent = self._replay.hold(length, _RACE_S) if held else Sent()
        try:
            await send(conn, head, sent, body, self.read_timeout_s)
        except Broken:
            if not (reused and conn.silent and sent.chunks is not None):
                raise
            if time.monotonic() - now >= _RACE_S:  # the server may have worked on it
                raise
            # The keep-alive race: the server closed the pooled connection as the request
            # went out, nothing came back and all of the body sent is here: once more, afresh.
            conn = await self._connect(origin)
            await send(conn, head, sent, body, self.read_timeout_s)
        finally:
            if held:
                self._replay.let_go(sent)
        try:
            return Response(conn, self, self.read_timeout_s)
        except Broken:
            conn.drop()
            raise

    def _pooled(self, origin: Origin, now: float) -> Conn | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if not _stale(conn, now):
                return conn
            conn.drop()
        return None

    def _spare(self, origin: Origin, now: float) -> None:
        """Start opening a connection to `origin` unless one is idle there or on its way, or
        the origin is quiet (not asked within `_IDLE_S` before `now`): a spare would idle out
        unused there (a request each 5 s: two connects each, one a TLS handshake for a
        provider)."""
        if self._closed:
            return
        asked = self._asked.get(origin)
        self._asked[origin] = now
        if self._sweep is None:
            self._arm_sweep()
        if asked is None or now - asked >= _IDLE_S:
            return
        idle = self._idle.get(origin)
        while idle and _stale(idle[0], now):
            idle.pop(0).drop()  # the oldest first: a stale spare must not pass for one
        if idle or origin in self._spares:
            return
        task = asyncio.get_running_loop().create_task(self._open_spare(origin))
        self._spares[origin] = task

    async def _open_spare(self, origin: Origin) -> None:
        try:
            conn = await self._connect(origin)
        except UpstreamError:
            return  # the next request that needs a connection tries, and fails, itself
        finally:
            self._spares.pop(origin, None)
        conn.idle_since = time.monotonic()
        self._keep_idle(conn)

    def _tls(self) -> ssl.SSLContext:
        """The TLS context, the system's default made once: building one loads the CA
        bundle (~20 ms of CPU on the event loop), too dear for every connection."""
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    async def _connect(self, origin: Origin) -> Conn:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        tls = self._tls() if scheme == "https" else None
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _transport, conn = await loop.create_connection(
                    lambda: Conn(origin),
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

    def release(self, conn: Conn) -> None:
        if not conn.reusable():
            conn.drop()
            return
        conn.recycle()
        self._keep_idle(conn)

    def _keep_idle(self, conn: Conn) -> None:
        idle = self._idle.setdefault(conn.origin, [])
        if self._closed or len(idle) >= _MAX_IDLE_PER_ORIGIN:
            conn.drop()
            if not idle:
                del self._idle[conn.origin]
            return
        idle.append(conn)
        if self._sweep is None:
            self._arm_sweep()

    def _arm_sweep(self) -> None:
        if not self._closed:
            self._sweep = asyncio.get_running_loop().call_later(_IDLE_S, self._swept)

    def _swept(self) -> None:
        """Close the connections idle past `_IDLE_S`; forget origins with none idle and
        origins not asked within it."""
        self._sweep = None
        now = time.monotonic()
        for origin in [o for o, asked in self._asked.items() if now - asked >= _IDLE_S]:
            del self._asked[origin]
        for origin, idle in list(self._idle.items()):
            stale = [c for c in idle if _stale(c, now)]
            for conn in stale:
                idle.remove(conn)
                conn.drop()
            if not idle:
                del self._idle[origin]
        if self._idle or self._asked:
            self._arm_sweep()

    async def aclose(self) -> None:
        """Close every idle connection and stop the spares; requests under way finish, and
        their connections are closed instead of pooled; new requests fail."""
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        spares = list(self._spares.values())
        for task in spares:
            task.cancel()
        await asyncio.gather(*spares, return_exceptions=True)
        for idle in self._idle.values():
            for conn in idle:
                conn.drop()
        self._idle.clear()
        self._asked.clear()


def _stale(conn: Conn, now: float) -> bool:
    """An idle connection not to be used again: closed, failed, or idle past `_IDLE_S`."""
    return conn.closed or conn.error is not None or now - conn.idle_since >= _IDLE_S

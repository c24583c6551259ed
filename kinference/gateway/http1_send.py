"""One request on one upstream connection: its head, its body, the wait for the response head.

The head and a small first body chunk go out as one write. The chunks sent are kept (`Sent`:
the references, no copies) until the response head arrives, so that a request which found
its pooled connection closed by the server as it went out (the keep-alive race: an engine
shutting down, or its keep-alive timer firing) can be sent again on a fresh one
(kinference.gateway.http1 decides when, and how much a larger body may hold).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterable
from urllib.parse import urlsplit

from kinference.gateway.http1_conn import Broken, Conn, ConnectFailed, Origin

JOIN_BELOW = 64 * 1024  # a first body chunk up to this many bytes is sent with the head
# A request whose body is at most this many bytes can always be sent again; its chunks are
# held until the response head. A larger one is held only out of the client's replay budget
# (the picker frees a pulled body's pieces as they go, and they would be held here instead).
REPLAY_MAX = 256 * 1024

Chunk = bytes | memoryview


class Sent:
    """The request body's chunks sent so far; `chunks` is None once more than `limit` bytes
    went out or the hold was let go (the body can no longer be sent again). `held` bytes
    are counted against a `ReplayBudget` until `let_go`."""

    __slots__ = ("_limit", "_size", "_timer", "chunks", "held")

    def __init__(self, limit: int = REPLAY_MAX, held: int = 0) -> None:
        self.chunks: list[Chunk] | None = []
        self._size = 0
        self._limit = limit
        self.held = held
        self._timer: asyncio.TimerHandle | None = None  # lets them go when the race is over

    def keep(self, chunk: Chunk) -> None:
        if self.chunks is not None:
            self._size += len(chunk)
            if self._size > self._limit:
                self.chunks = None
            else:
                self.chunks.append(chunk)

    def expire(self, timer: asyncio.TimerHandle) -> None:
        """`timer` lets the hold go when it fires (cancelled by an earlier `let_go`)."""
        self._timer = timer

    def let_go(self) -> int:
        """Drop the chunks and end the hold; the bytes it held (0 the second time)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.chunks = None
        held, self.held = self.held, 0
        return held


class ReplayBudget:
    """The most bytes of bodies over `REPLAY_MAX` held at once, so that they can be sent
    again, and how many are held now."""

    __slots__ = ("held", "total")

    def __init__(self, total: int) -> None:
        self.total = total
        self.held = 0

    def has_room(self, length: int) -> bool:
        """Whether a body of `length` bytes can be held (a small one always is)."""
        return length <= REPLAY_MAX or length <= self.total - self.held

    def hold(self, length: int, for_s: float) -> Sent:
        """A `Sent` that keeps a body of `length` bytes for at most `for_s` seconds."""
        sent = Sent(length, held=length)
        self.held += length
        sent.expire(asyncio.get_running_loop().call_later(for_s, self.let_go, sent))
        return sent

    def let_go(self, sent: Sent) -> None:
        """Drop `sent`'s chunks and give back what it held."""
        self.held -= sent.let_go()


async def send(
    conn: Conn, head: bytes, sent: Sent, body: AsyncIterable[Chunk], timeout_s: float
) -> None:
    """Send `head`, the chunks `sent` kept from an attempt before, then the rest of `body`;
    returns once the response head arrived. Whatever fails drops the connection."""
    conn.asked = True
    pending: bytes | None = head
    try:
        for chunk in list(sent.chunks or ()):
            await _write(conn, pending, chunk, timeout_s)
            pending = None
        async for chunk in body:
            sent.keep(chunk)
            await _write(conn, pending, chunk, timeout_s)
            pending = None
        if pending is not None:
            await conn.write(pending, timeout_s)
        # Awaited as it is (no shield): a cancelled wait drops the connection below, and
        # the task wakes in the loop turn the head arrives in, not one later.
        conn.expect(conn.head, timeout_s, "no response head in time")
        await conn.head  # raises ReadTimeout when the deadline passes first
    except BaseException:
        conn.drop()
        raise


async def _write(conn: Conn, head: bytes | None, chunk: Chunk, timeout_s: float) -> None:
    """Write `chunk`, after `head` unless it went already (with a small chunk: one write)."""
    data = chunk
    if head is not None:
        if len(chunk) <= JOIN_BELOW:
            data = b"".join((head, chunk))
        else:
            await conn.write(head, timeout_s)
    await conn.write(data, timeout_s)


@functools.lru_cache(maxsize=512)
def split(url: str) -> tuple[Origin, str]:
    """The origin and the request target of `url`; raises ConnectFailed. Cached: a
    gateway sends to a few engines' few paths (urlsplit caches, its `port` and `hostname`
    parse the authority again on every call)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConnectFailed(f"not an http(s) URL: {url[:200]}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = parts.path or "/"
    if parts.query:
        target = f"{target}?{parts.query}"
    return (parts.scheme, parts.hostname, port), target


def request_head(method: str, target: str, origin: Origin, headers: list[tuple[str, str]]) -> bytes:
    """The request line and headers; raises Broken for a header value with a line break."""
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


def declared_length(headers: list[tuple[str, str]]) -> int:
    """The body length a request declares (its `content-length`), 0 if none."""
    for name, value in headers:
        if name == "content-length":
            return int(value) if value.isdigit() else 0
    return 0

"""Answering a connection past the cap (kinference.gateway.capacity) so that its client reads
the 503, at a small bounded cost that does not grow with the client.

A refused connection gets a small protocol of its own, never uvicorn's (no parser, no task,
no timer of its own): the pre-built answer is written as the connection is made, the
gateway's side is ended (FIN), and what the client still sends is read and dropped (at
most `DROP_MAX` bytes, then no longer read) until the client closes, or `LINGER_S` passes.
That is a lingering close, as nginx's: a socket closed with unread bytes sends a reset,
which can reach the client before the answer, or fail the client's write of its request;
the client then sees a connection error where it should see the 503 its retry logic knows.
A client that reads the answer sees the end right after it and closes: most refused
connections linger for a round trip.

The connections still lingering wait in one insertion-ordered table (all wait as long),
swept by one timer at most every `SWEEP_S`. At most `ConnectionCap.linger_max` linger at
once (the descriptors the process has room for); past that a refusal is still answered
but closed at once, its request unread (counted, logged: the answer may then be lost).
"""

from __future__ import annotations

import asyncio
from typing import cast

from kinference.gateway.capacity import ConnectionCap

LINGER_S = 2.0  # the longest a refused client's bytes are read and dropped before closing
SWEEP_S = 0.25  # the deadlines are checked at most this often (a linger lasts up to +SWEEP_S)
DROP_MAX = 1024 * 1024  # the most bytes read and dropped from one refused client


class Refusals:
    """The refused connections of one server: answered, lingering, closed."""

    __slots__ = ("_lingering", "_loop", "_timer", "cap")

    def __init__(self, cap: ConnectionCap) -> None:
        self.cap = cap
        self._lingering: dict[Refused, float] = {}  # -> loop time it is closed at
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None

    def protocol(self) -> Refused:
        """The protocol of a connection refused as it is accepted."""
        return Refused(self)

    def refuse(self, transport: asyncio.BaseTransport) -> None:
        """A connection whose protocol was built for serving, refused as it was made: the
        transport goes over to a `Refused` protocol."""
        refused = Refused(self)
        transport.set_protocol(refused)
        refused.connection_made(transport)

    @property
    def lingering(self) -> int:
        """Refused connections answered and not closed yet."""
        return len(self._lingering)

    def answer(self, refused: Refused, transport: asyncio.Transport) -> None:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        now = loop.time()
        transport.write(self.cap.answer)
        if not self.cap.refuse(now, lingering=len(self._lingering)):
            transport.close()  # at the descriptor bound: no lingering (the answer is written)
            return
        if transport.is_closing():
            return  # the client reset it already
        transport.write_eof()
        self._lingering[refused] = now + LINGER_S
        if self._timer is None:
            self._timer = loop.call_at(now + LINGER_S, self._sweep)

    def closed(self, refused: Refused) -> None:
        self._lingering.pop(refused, None)

    def close_all(self) -> None:
        """Close every lingering connection now (the server stops)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for refused in list(self._lingering):
            refused.close()
        self._lingering.clear()

    def _sweep(self) -> None:
        self._timer = None
        loop = cast(asyncio.AbstractEventLoop, self._loop)
        now = loop.time()
        due = []
        next_at = None
        for refused, at in self._lingering.items():
            if at > now:
                next_at = at
                break
            due.append(refused)
        for refused in due:
            del self._lingering[refused]
            refused.close()
        if next_at is not None:
            self._timer = loop.call_at(max(next_at, now + SWEEP_S), self._sweep)


class Refused(asyncio.Protocol):
    """One refused connection: answered when made, its bytes dropped, closed when the client
    closes (or by `Refusals`)."""

    __slots__ = ("_dropped", "_refusals", "_transport")

    def __init__(self, refusals: Refusals) -> None:
        self._refusals = refusals
        self._transport: asyncio.Transport | None = None
        self._dropped = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._refusals.answer(self, self._transport)

    def data_received(self, data: bytes) -> None:
        self._dropped += len(data)
        if self._dropped > DROP_MAX and self._transport is not None:
            self._transport.pause_reading()  # no more work for it; closed at its deadline

    def eof_received(self) -> bool:
        return False  # the client is done: the transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        self._refusals.closed(self)
        self._transport = None

    def close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

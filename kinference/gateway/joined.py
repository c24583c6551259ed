"""uvicorn's HTTP/1.1 protocol with each response head sent in one write with its first bytes.

uvicorn writes a response's head as soon as the app sends `http.response.start`, and its
body in a write of its own: two system calls (and two segments the client wakes up for)
where one does. Here the head is held back until the next write, which joins it, or until
the current turn of the event loop ends, whichever comes first: a body that is already at
hand (a whole response, the first events of a stream) leaves in the same write as its head,
and a head whose body is not is not delayed past the loop turn it was sent in.

Each write leaves at once: the connection's socket has TCP_NODELAY set, whatever the event
loop. uvloop sets it on every TCP connection; asyncio's own loop only on sockets made with
protocol IPPROTO_TCP, which the socket the server binds (`socket.create_server`, protocol
0) and the connections it accepts are not. Without it, a stream's second small write waits
behind Nagle's algorithm for the client's delayed ACK of the first (up to 40 ms on Linux).
"""

from __future__ import annotations

import asyncio
import functools
import socket
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

# The ASGI scope extension (`scope["extensions"][CUT]["cut"]`, called without arguments) that
# ends a response begun, cut short: kinference.gateway.exchange calls it when its upstream
# fails mid-body.
CUT = "kinference.cut"
# The extension (`scope["extensions"][WRITE]["write"]`, called with body bytes) that writes
# a piece of a response begun, more to come, at once and without the ASGI send's coroutine,
# exactly as uvicorn's send would frame it; it answers False, writing nothing, when that
# send would do more (wait for the socket to drain, drop it for a client gone ...).
WRITE = "kinference.write"


class HeadJoiningTransport:
    """A connection's transport that holds the first write after a request's head arrived
    (the response head) until the next write or the end of the loop turn."""

    __slots__ = ("_held", "_hold", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._hold = False
        self._held: bytes | None = None

    def hold_next(self) -> None:
        """Hold the next write (a request's head has arrived: a response head comes next)."""
        self._hold = True

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif self._hold:
            self._hold = False
            self._held = data
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        """Write what is held, if anything."""
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)  # everything else as the transport has it


class HeadJoiningProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over a `HeadJoiningTransport` (`uvicorn.Config(http=...)`)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        joined = HeadJoiningTransport(transport, self.loop)
        super().connection_made(cast(asyncio.Transport, joined))

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cast(HeadJoiningTransport, self.transport).hold_next()
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:  # not an upgrade
            self.scope["extensions"] = {
                CUT: {"cut": functools.partial(self._cut, cycle)},
                WRITE: {"write": functools.partial(_write_body, cycle)},
            }

    def _cut(self, cycle: RequestResponseCycle) -> None:
        """End `cycle`'s response where it stands: the bytes written go out, then the
        connection closes without the body's end (the client sees it cut short). The app
        then returns quietly (uvicorn logs a response left incomplete unless its
        connection is gone)."""
        cycle.disconnected = True
        self.transport.close()


def _write_body(cycle: RequestResponseCycle, body: bytes) -> bool:
    """uvicorn's `send` of `{"type": "http.response.body", "body": body, "more_body": True}`
    in a chunked response under way with nothing to wait for; else False, nothing done."""
    if (
        cycle.chunked_encoding is not True
        or cycle.disconnected
        or cycle.flow.write_paused
        or not cycle.response_started
        or cycle.response_complete
        or cycle.scope["method"] == "HEAD"
    ):
        return False
    cycle.transport.write(b"%x\r\n%b\r\n" % (len(body), body))
    return True

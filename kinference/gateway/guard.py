"""The bounds a client of the gateway's HTTP server cannot pass: a request head's size, the
time it takes to send one, and how long it may leave a response unread.

uvicorn's httptools protocol has none of them: a request head grows in memory without
limit (httptools holds an unfinished header whole, and joins each new piece onto it: 200 MiB
of one header line took 100 s of the event loop's CPU), and a connection that sends half a
request line, or nothing at all, or stops reading its response, is held for ever (with its
upstream connection and the picker's count of it as load). As nginx bounds them
(`large_client_header_buffers`, `client_header_timeout`, `send_timeout`):

- a head over `REQUEST_HEAD_MAX` bytes is answered 431 and the connection closed;
- a connection whose request head is not whole `client_timeout_s` after it opened or after
  the head's first byte is closed (with a 408 when any of it came);
- a response whose client leaves its socket full for `client_timeout_s` in a row has its
  connection reset; the request ends as for a client hanging up (its Abort goes out);
- a request answered before its body came whole (401, 413, ...) has the rest of its body
  read and dropped for at most `client_timeout_s` after the answer, then the connection is
  closed; once it is whole, the connection is idle as after any response (uvicorn's
  protocol read and dropped such a body for as long as it came, with no timer at all, and
  no keep-alive timer after it);
- bytes between requests that begin none (`\r\n`) leave the keep-alive timer as it was
  (uvicorn's cancels it on any byte, and a connection that sent one empty line after a
  response was held for ever);
- a request the parser refuses is answered 400 with the error JSON (uvicorn's is text) and
  a lingering close, as the refusals below;
- a connection past the most the gateway holds at once (kinference.gateway.capacity) is
  answered 503 at once, before uvicorn sees it, and closed (kinference.gateway.refusals;
  the server mostly refuses it before building this protocol at all).

The body is not bounded here: uvicorn stops reading above 64 KiB unread, a body that
stalls is failed by the picker's idle timeout (408), and one too slow in all by the
upload's total (kinference.gateway.upload, 408). One timer per connection, moved only
when it fires early.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

from kinference.gateway.errors import GatewayError
from kinference.gateway.joined import HeadJoiningProtocol, HeadJoiningTransport
from kinference.gateway.refusals import LINGER_S, Refusals

log = logging.getLogger(__name__)

# The most bytes a request head (request line and headers) may take; nginx's default
# allows 32 KiB (4 buffers of 8 KiB), Node's 16 KiB.
REQUEST_HEAD_MAX = 64 * 1024
_UVICORN_PARSER_ERROR = "Invalid HTTP request received."


class _HeadTooLarge(Exception):
    """Raised in a parser callback to stop parsing a head over the limit."""


class GuardedProtocol(HeadJoiningProtocol):
    """uvicorn's protocol (heads joined) with the bounds above; `client_timeout_s` None
    leaves time unbounded (only the head's size is), `refusals` None the connections."""

    def __init__(
        self,
        *args: Any,
        client_timeout_s: float | None = None,
        refusals: Refusals | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._timeout_s = client_timeout_s
        self._refusals = refusals
        self._admitted = False  # counted open in `refusals.cap`
        self._head_since: float | None = None  # loop time a head began (or the connection)
        self._heads = 0  # heads begun on this connection
        self._head_bytes = 0  # bytes of the current head, in reads wholly within it
        self._stalled_since: float | None = None  # loop time the client's socket filled
        self._dropping_since: float | None = None  # loop time a body's answer went out
        self._timer: asyncio.TimerHandle | None = None
        self._refused = False  # answered with an error, closing
        self._too_large = False  # a whole head measured over the limit
        self._read = 0  # bytes in the read being parsed
        self._first_read = 0  # bytes in the read the current head began in

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        refusals = self._refusals
        if refusals is not None:
            if not refusals.cap.admit():  # filled since this protocol was built
                refusals.refuse(transport)  # no longer this protocol's connection
                return
            self._admitted = True
        super().connection_made(transport)
        self._head_began()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._admitted:
            self._admitted = False
            cast(Refusals, self._refusals).cap.release()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # read and dropped until the connection closes (the answer must not be lost)
        heads, in_head = self._heads, self._head_since is not None
        idle = self.timeout_keep_alive_task  # uvicorn cancels it on any byte
        self._read = len(data)
        super().data_received(data)
        if idle is not None and self._heads == heads and not self.transport.is_closing():
            # bytes that began no request (`\r\n`): the connection is as idle as it was
            self.timeout_keep_alive_task = self.loop.call_at(
                idle.when(), self.timeout_keep_alive_handler
            )
        if in_head and self._head_since is not None and self._heads == heads:
            self._head_bytes += len(data)  # a read in the middle of one head
            if self._head_bytes > REQUEST_HEAD_MAX and not self.transport.is_closing():
                self._refuse_large()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._unset_keepalive_if_required()  # a request under way is not idle
        self._heads += 1
        self._head_began()
        self._first_read = self._read

    def on_headers_complete(self) -> None:
        self._head_since = None
        # The reads the head came in are an upper bound of its size; only past the limit is
        # the head measured (a whole head arrives in one or two reads, which the count of
        # the reads in its middle misses).
        if self._head_bytes + self._first_read + self._read > REQUEST_HEAD_MAX:
            size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
            if size > REQUEST_HEAD_MAX:
                self._too_large = True
                self.logger = _without_parser_warning(self.logger)  # ours is the one line
                raise _HeadTooLarge  # stops the parser; uvicorn answers 400, below
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        if self._dropping_since is not None:  # the body of a request answered early is in:
            self._dropping_since = None  # the connection is idle, as after any response
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

    def on_response_complete(self) -> None:
        cycle = self.cycle
        super().on_response_complete()
        if cycle is not None and cycle.more_body and not self.transport.is_closing():
            # answered before its body came whole: the rest is read and dropped, for a time
            self._unset_keepalive_if_required()
            self._dropping_since = self.loop.time()
            self._arm(self._dropping_since)

    def send_400_response(self, msg: str) -> None:
        """A request the parser refused: the error JSON every other error has (uvicorn's is
        text), with a lingering close (uvicorn's closes at once: a reset can overtake it)."""
        if self._too_large:
            self._refuse_large()
        elif self.cycle is not None and not self.cycle.response_complete:
            super().send_400_response(msg)  # a response under way: it is cut short as before
        else:
            self._refuse(400, "invalid_http_request", "the request is not valid HTTP/1.1")

    def pause_writing(self) -> None:
        super().pause_writing()
        self._stalled_since = self.loop.time()
        self._arm(self._stalled_since)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._stalled_since = None

    def _head_began(self) -> None:
        self._head_since = self.loop.time()
        self._head_bytes = 0
        self._arm(self._head_since)

    def _arm(self, since: float) -> None:
        if self._timer is None and self._timeout_s is not None:
            self._timer = self.loop.call_at(since + self._timeout_s, self._check)

    def _check(self) -> None:
        self._timer = None
        if self._timeout_s is None or self.transport.is_closing():
            return
        pending = (self._head_since, self._stalled_since, self._dropping_since)
        waits = [t for t in pending if t is not None]
        if not waits:
            return  # nothing pending: the next head or full socket arms the timer again
        since = min(waits)
        if self.loop.time() < since + self._timeout_s:
            self._arm(since)
        elif since == self._stalled_since:
            log.warning("client %s: left the response unread for %gs", _who(self), self._timeout_s)
            self.transport.abort()
        elif since == self._dropping_since:
            log.warning("client %s: body still coming %gs after its answer", _who(self),
                        self._timeout_s)  # fmt: skip
            self.transport.close()
        elif self._heads:
            log.warning("client %s: request head not whole in %gs", _who(self), self._timeout_s)
            self._refuse(408, "request_timeout", "the request head did not arrive in time")
        else:
            self.transport.close()  # a connection that never said anything

    def _refuse_large(self) -> None:
        """A head over `REQUEST_HEAD_MAX`, found in its middle or at its end: one line, 431."""
        log.warning("client %s: request head over %d bytes", _who(self), REQUEST_HEAD_MAX)
        self._refuse(431, "request_header_too_large", "the request head is too large")

    def _refuse(self, status: int, code: str, message: str) -> None:
        """Answer with the error JSON and close the connection."""
        reason = {
            400: b"Bad Request",
            408: b"Request Timeout",
            431: b"Request Header Fields Too Large",
        }[status]
        body = GatewayError(status, code, message).body()
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (status, reason, len(body), body)
        )
        # A lingering close (nginx's): closed with unread bytes, the socket would send a
        # reset, which can reach the client before the answer does. Ends the writing side,
        # then drops what comes for `LINGER_S` (or until the client closes).
        self._refused = True
        cast(HeadJoiningTransport, self.transport).flush()
        self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)


def _without_parser_warning(logger: logging.Logger) -> logging.Logger:
    """`logger` (uvicorn's, for one connection) without the warning uvicorn logs for a
    parser error, "Invalid HTTP request received.": a head refused as too large is logged
    once, by us. The records go to `logger`'s handlers and its parents' as before."""
    quiet = logging.Logger(logger.name)
    quiet.parent = logger
    quiet.addFilter(lambda record: record.msg != _UVICORN_PARSER_ERROR)
    return quiet


def _who(protocol: GuardedProtocol) -> str:
    client = protocol.client
    return f"{client[0]}:{client[1]}" if client else "?"

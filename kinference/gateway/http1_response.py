"""An upstream response whose head has arrived (`kinference.gateway.http1`'s client hands it
out): its headers, its body as it comes (decoded where the upstream compressed against the
request's `accept-encoding: identity`), and its end, which gives the connection back."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

from kinference.gateway.decoded import decoder_for
from kinference.gateway.http1_conn import Conn


class Releaser(Protocol):
    """Where a response's connection goes when it is done (the client's pool)."""

    def release(self, conn: Conn) -> None: ...


class Response:
    """An upstream response whose head has arrived; its body is read with `chunks()`."""

    def __init__(self, conn: Conn, client: Releaser, read_timeout_s: float) -> None:
        self._conn = conn
        self._client = client
        self._read_timeout_s = read_timeout_s
        self.status: int = conn.parser.get_status_code()
        self.headers = conn.headers
        self._closed = False
        # An upstream compressing although asked not to; raises Broken (an unknown coding).
        self._decoder = decoder_for(self.header("content-encoding"))
        self._pieces: AsyncIterator[bytes] | None = None  # `chunks()`, read by `next_chunk`
        # The next body bytes, or None at the end, one await at a time (what `chunks()`
        # yields): the connection's own read when the body is not decoded, so that a
        # relay's read per event goes through no generator.
        self.next_chunk: Callable[[], Awaitable[bytes | None]] = (
            functools.partial(conn.next_body, read_timeout_s)
            if self._decoder is None
            else self._next_decoded
        )

    def header(self, name: str) -> str:
        """The first value of header `name` (lower-case), or ""."""
        for key, value in self.headers:
            if key == name:
                return value
        return ""

    @property
    def drained(self) -> bool:
        """Nothing more will come: the body is complete and all of it was handed out (a
        decoded body says so only when its iteration ends)."""
        return self._conn.drained and self._decoder is None

    @property
    def decoded(self) -> bool:
        """The body is decoded from the upstream's `content-encoding` (its length differs)."""
        return self._decoder is not None

    async def chunks(self) -> AsyncIterator[bytes]:
        decoder = self._decoder
        while (data := await self._conn.next_body(self._read_timeout_s)) is not None:
            if decoder is None:
                yield data
                continue
            for piece in decoder.feed(data):
                yield piece
        if decoder is not None and (tail := decoder.end()):
            yield tail

    async def pipe(self, sink: Callable[[bytes], bool]) -> None:
        """Hand the body's bytes to `sink` as they arrive, from the connection's own read
        callback (no task woken, no await, per read), until the response completes or fails
        (raises `UpstreamError`), `sink` answers False (it keeps what it could not pass on),
        or bytes wait that `next_chunk` gives. Not for a decoded body (nothing is piped)."""
        conn = self._conn
        if self._decoder is not None:
            return
        conn.sink = sink
        try:
            while conn.sink is not None and not conn.body and not conn.complete:
                if conn.error is not None:
                    raise conn.error
                await conn.wait(self._read_timeout_s)
        finally:
            conn.sink = None

    async def _next_decoded(self) -> bytes | None:
        if self._pieces is None:
            self._pieces = aiter(self.chunks())
        return await anext(self._pieces, None)

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    def close(self) -> None:
        """Done with the response: a finished connection goes back to the pool."""
        if self._closed:
            return
        self._closed = True
        self._client.release(self._conn)

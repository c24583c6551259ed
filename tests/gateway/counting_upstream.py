"""A keep-alive HTTP/1.1 upstream on a free port that counts, server side, the connections it
accepted and saw closed, and the requests it read; tests wait on those counts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


async def body(*chunks: bytes) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head, await reader.readexactly(length)


class Clock:
    """`time` for the upstream client: a monotonic clock the test moves, from the real one
    (connections stamp their idle time with the real clock: a clock starting at a made-up
    1000 s took every pooled connection for stale on a machine up for less than that)."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now


class Upstream:
    """Answers every request on a connection with `answer` (by default 200 "ok", once
    `gate` is open) until the client closes it."""

    def __init__(self, answer: Answer | None = None) -> None:
        self.accepted = 0
        self.closed = 0
        self.requests = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self._answer = answer or self._ok
        self._changed = asyncio.Event()
        self._server: asyncio.Server | None = None
        self.url = ""

    @property
    def open(self) -> int:
        return self.accepted - self.closed

    async def __aenter__(self) -> Upstream:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def until(self, condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
        """Wait (without a fixed sleep) until `condition()` holds after some count changed."""
        async with asyncio.timeout(timeout_s):
            while not condition():
                self._changed.clear()
                await self._changed.wait()

    def _count(self) -> None:
        self._changed.set()

    async def _ok(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        self.requests += 1
        self._count()
        await self.gate.wait()
        writer.write(OK)
        await writer.drain()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._count()
        try:
            while not reader.at_eof():
                await self._answer(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.closed += 1
            self._count()
            writer.close()

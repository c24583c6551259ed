"""A fake model server: a minimal HTTP/1.1 responder serving a configurable metrics page.

It speaks just enough HTTP for httpx (request line and headers, keep-alive,
Content-Length responses) and can misbehave on demand: answer 500, hang without answering,
drop the connection, or answer after a delay. It counts requests and the most it had in
progress at once, so tests can assert that scrapes of one endpoint never overlap.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from dataclasses import dataclass, field


class Mode(enum.Enum):
    OK = "ok"
    FAIL = "fail"  # 500 Internal Server Error
    HANG = "hang"  # read the request, never answer (until the engine closes)
    DROP = "drop"  # read the request, close the connection
    SLOW = "slow"  # answer after `delay_s`


@dataclass
class FakeEngine:
    """Serves `text` at `path`; 404 elsewhere. Mutate `text` and `mode` between scrapes."""

    text: str = ""
    path: str = "/metrics"
    mode: Mode = Mode.OK
    delay_s: float = 0.05
    requests: int = 0
    paths: list[str] = field(default_factory=list)
    in_progress: int = 0
    max_in_progress: int = 0
    _server: asyncio.Server | None = None
    _release: asyncio.Event = field(default_factory=asyncio.Event)
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    async def start(self) -> FakeEngine:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "start() first"
        port = self._server.sockets[0].getsockname()[1]
        return f"127.0.0.1:{port}"

    async def close(self) -> None:
        """Stop listening, end every connection (hanging or idle), and wait for them."""
        self._release.set()
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        try:
            while await self._serve_one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away
        finally:
            writer.close()
            await _closed(writer)
            self._writers.discard(writer)
            self._handlers.discard(task)

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False ends the connection."""
        head = await reader.readuntil(b"\r\n\r\n")
        path = head.split(b" ", 2)[1].decode()
        self.requests += 1
        self.paths.append(path)
        self.in_progress += 1
        self.max_in_progress = max(self.max_in_progress, self.in_progress)
        try:
            return await self._respond(path, writer)
        finally:
            self.in_progress -= 1

    async def _respond(self, path: str, writer: asyncio.StreamWriter) -> bool:
        mode = self.mode
        if mode is Mode.DROP:
            return False
        if mode is Mode.HANG:
            await self._release.wait()
            return False
        if mode is Mode.SLOW:
            await asyncio.sleep(self.delay_s)  # simulated engine latency, not a wait for state
        if mode is Mode.FAIL:
            status, body = "500 Internal Server Error", b"engine exploded\n"
        elif path == self.path:
            status, body = "200 OK", self.text.encode()
        else:
            status, body = "404 Not Found", b"not found\n"
        head = (
            f"HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()
        return True


async def _closed(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):  # a reset peer: closed all the same
        await writer.wait_closed()

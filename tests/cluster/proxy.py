"""A TCP proxy in front of a real redis-server, for faults the network makes: a pipeline
split between two segments (`SplittingProxy`), a reply lost after its command was applied
(`CuttingProxy`). The base forwards both ways unchanged; each behaviour overrides one hook."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass


@dataclass
class Link:
    """One proxied connection."""

    up: asyncio.StreamWriter  # to redis-server
    down: asyncio.StreamWriter  # to the client
    cut: bool = False  # set: the next reply is dropped and the link closed


class Proxy:
    """Forwards every connection to `port` on 127.0.0.1, both ways, unchanged."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        """Listen on a free port; return it."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def to_server(self, data: bytes, link: Link) -> None:
        """Forward what the client wrote."""
        link.up.write(data)
        await link.up.drain()

    async def to_client(self, data: bytes, link: Link) -> bool:
        """Forward what the server replied; False ends the link."""
        link.down.write(data)
        await link.down.drain()
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._port)
        link = Link(up_writer, writer)

        async def upstream() -> None:
            while data := await reader.read(65536):
                await self.to_server(data, link)

        async def downstream() -> None:
            while (data := await up_reader.read(65536)) and await self.to_client(data, link):
                pass

        tasks = [asyncio.create_task(upstream()), asyncio.create_task(downstream())]
        with contextlib.suppress(Exception):
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        for stream in (writer, up_writer):
            stream.close()


def first_command_end(data: bytes) -> int:
    """Where the first RESP command (an array of bulk strings) in `data` ends."""
    count, at = data[1 : data.index(b"\r\n")], data.index(b"\r\n") + 2
    for _ in range(int(count)):
        length = int(data[at + 1 : data.index(b"\r\n", at)])
        at = data.index(b"\r\n", at) + 2 + length + 2
    return at


class SplittingProxy(Proxy):
    """Once armed, sends the next write's first command alone, then holds the rest until
    `go` is set."""

    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.armed = False
        self.split = asyncio.Event()  # set once the first command went through alone
        self.go = asyncio.Event()

    async def to_server(self, data: bytes, link: Link) -> None:
        if self.armed:
            self.armed, end = False, first_command_end(data)
            await super().to_server(data[:end], link)
            self.split.set()
            await self.go.wait()
            data = data[end:]
        await super().to_server(data, link)


class CuttingProxy(Proxy):
    """Once `marker` is set, lets the next write naming it through and then cuts that
    connection before the reply, as a stalled or restarted link does."""

    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.marker: bytes | None = None  # cut after the next command that names this
        self.cuts = 0

    async def to_server(self, data: bytes, link: Link) -> None:
        await super().to_server(data, link)
        if self.marker is not None and self.marker in data:
            self.marker, link.cut = None, True

    async def to_client(self, data: bytes, link: Link) -> bool:
        if link.cut:
            self.cuts += 1
            return False  # the reply is lost
        return await super().to_client(data, link)

"""Counting the default TLS contexts a client builds, against a server that fails every
handshake (a default context loads the CA bundle: ~20 ms of CPU on the event loop)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest


def count_default_contexts(monkeypatch: pytest.MonkeyPatch) -> list[ssl.SSLContext]:
    """From now on in the test, every `ssl.create_default_context()` lands in the list."""
    built: list[ssl.SSLContext] = []
    default = ssl.create_default_context

    def counting() -> ssl.SSLContext:
        built.append(default())
        return built[-1]

    monkeypatch.setattr(ssl, "create_default_context", counting)
    return built


@asynccontextmanager
async def failing_handshakes() -> AsyncIterator[int]:
    """A local port whose server closes every connection at once."""

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()

"""Fetching metrics pages: one keep-alive HTTP/1.1 connection per engine, and little else.

A scrape is a GET of a few kilobytes, tens of times a second per replica. httpx spends
about 3 ms of CPU on each (connection-pool bookkeeping, anyio stream wrappers, cookies,
header models); here the protocol is h11's (the HTTP/1.1 state machine httpx itself uses:
chunked bodies, keep-alive and framing errors handled right) over plain asyncio streams,
which costs a fraction of that. `HttpxPages` adapts an `httpx.AsyncClient` for tests that
mock the transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import NamedTuple, Protocol
from urllib.parse import urlsplit

import h11
import httpx

_READ_BYTES = 64 * 1024  # one socket read
_USER_AGENT = "kinference-scraper"


class FetchError(Exception):
    """The page could not be had: connection, protocol, status or size problem."""


class PageTooLarge(FetchError):
    """The page is larger than the scraper accepts."""


class _Broken(FetchError):
    """The connection failed (reset, closed early, not HTTP): it is dropped."""


class PageFetcher(Protocol):
    """GETs a page; raises `FetchError` (or `OSError`) for anything but a complete 2xx."""

    async def get(self, url: str, accept: str, max_bytes: int) -> bytes: ...

    async def aclose(self) -> None: ...


class _Get(NamedTuple):
    target: str  # path and query
    netloc: str  # the Host header
    accept: str
    max_bytes: int


class _Connection:
    """One HTTP/1.1 connection; requests on it run one after another."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.http = h11.Connection(h11.CLIENT)
        self.requests = 0

    @classmethod
    async def open(cls, host: str, port: int, tls: ssl.SSLContext | None) -> _Connection:
        reader, writer = await asyncio.open_connection(host, port, ssl=tls)
        return cls(reader, writer)

    @property
    def reusable(self) -> bool:
        return self.http.our_state is h11.IDLE and not self.writer.is_closing()

    async def get(self, target: str, host: str, accept: str, max_bytes: int) -> bytes:
        self.requests += 1
        headers = [("Host", host), ("Accept", accept), ("User-Agent", _USER_AGENT)]
        request = h11.Request(method="GET", target=target, headers=headers)
        self.writer.write(self.http.send(request) + (self.http.send(h11.EndOfMessage()) or b""))
        await self.writer.drain()
        status, body = await self._response(max_bytes)
        if self.http.our_state is h11.DONE and self.http.their_state is h11.DONE:
            self.http.start_next_cycle()  # keep-alive: the next scrape reuses the socket
        if not 200 <= status < 300:
            raise FetchError(f"HTTP {status}")
        return bytes(body)

    async def _response(self, max_bytes: int) -> tuple[int, bytearray]:
        status, body = 0, bytearray()
        while True:
            event = self.http.next_event()
            if event is h11.NEED_DATA:
                self.http.receive_data(await self.reader.read(_READ_BYTES))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > max_bytes:
                    raise PageTooLarge(f"metrics page over {max_bytes} bytes")
            elif isinstance(event, h11.EndOfMessage):
                return status, body
            elif isinstance(event, h11.ConnectionClosed):
                raise _Broken("connection closed before the response ended")

    def close(self) -> None:
        self.writer.close()


class LeanPages:
    """Keeps at most one idle connection per host:port and scheme."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int, bool], _Connection] = {}
        self._tls: ssl.SSLContext | None = None  # built at the first HTTPS page, then kept

    async def get(self, url: str, accept: str, max_bytes: int) -> bytes:
        parts = urlsplit(url)
        tls = parts.scheme == "https"
        host = parts.hostname or ""
        key = (host, parts.port or (443 if tls else 80), tls)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        request = _Get(target, parts.netloc, accept, max_bytes)
        connection = self._idle.pop(key, None)
        if connection is not None:
            try:
                return await self._use(key, connection, request)
            except _Broken:
                pass  # most likely an idle keep-alive the engine closed: one fresh try
        connection = await _Connection.open(key[0], key[1], self._context() if tls else None)
        return await self._use(key, connection, request)

    def _context(self) -> ssl.SSLContext:
        """The system's default TLS context, made once: building one loads the CA bundle
        (~20 ms of CPU on the event loop), and an engine that keeps failing is reconnected
        at every scrape."""
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    async def _use(
        self,
        key: tuple[str, int, bool],
        connection: _Connection,
        request: _Get,
    ) -> bytes:
        try:
            page = await connection.get(*request)
        except FetchError:
            self._keep_or_close(key, connection)
            raise
        except (h11.ProtocolError, OSError) as exc:
            connection.close()
            raise _Broken(f"connection to {request.netloc} failed: {exc}") from exc
        except BaseException:  # cancelled or timed out mid-response: the socket is unusable
            connection.close()
            raise
        self._keep_or_close(key, connection)
        return page

    def _keep_or_close(self, key: tuple[str, int, bool], connection: _Connection) -> None:
        if connection.reusable and key not in self._idle:
            self._idle[key] = connection
        else:
            connection.close()

    async def aclose(self) -> None:
        connections, self._idle = list(self._idle.values()), {}
        for connection in connections:
            connection.close()
            with contextlib.suppress(OSError):
                await connection.writer.wait_closed()


class HttpxPages:
    """The same interface over an `httpx.AsyncClient` (whose owner closes it)."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def get(self, url: str, accept: str, max_bytes: int) -> bytes:
        try:
            async with self._client.stream("GET", url, headers={"Accept": accept}) as response:
                response.raise_for_status()
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        raise PageTooLarge(f"metrics page over {max_bytes} bytes")
        except httpx.TimeoutException as exc:
            raise TimeoutError(str(exc)) from exc
        except httpx.HTTPError as exc:
            raise FetchError(str(exc)) from exc
        return bytes(body)

    async def aclose(self) -> None:
        return None

"""Requests cancelled at each of their waits: the connection is closed, never pooled half
used, and the next request gets a connection of its own; counted on the server's side."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kinference.gateway.http1 import HttpClient
from tests.gateway.counting_upstream import OK, Upstream, body, read_request

MiB = 1024 * 1024


def client() -> HttpClient:
    return HttpClient(connect_timeout_s=2.0, read_timeout_s=10.0, keep_spare=True)


async def cancelled(task: asyncio.Future[Any]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_cancelled_while_the_body_is_written() -> None:
    received = 0
    held = asyncio.Event()

    async def slow_reader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal received
        await reader.readuntil(b"\r\n\r\n")
        while received < 4 * MiB:
            received += len(await reader.read(65536))
        held.set()
        await reader.read()  # stops reading until the client hangs up

    async def large() -> AsyncIterator[bytes]:
        for _ in range(256):
            yield b"x" * MiB

    async with Upstream(slow_reader) as upstream:
        http = client()
        try:
            length = [("content-length", str(256 * MiB))]
            call = asyncio.ensure_future(http.request("POST", upstream.url, length, large()))
            await held.wait()
            await cancelled(call)
            await upstream.until(lambda: upstream.closed >= 1)
            assert not any(conn.asked for idle in http._idle.values() for conn in idle)
        finally:
            await http.aclose()


async def test_cancelled_while_waiting_for_the_head_then_the_next_request_is_answered() -> None:
    held = asyncio.Event()

    async def first_held(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        if not held.is_set():
            held.set()
            await reader.read()  # no answer, until the client hangs up
            return
        writer.write(OK)
        await writer.drain()

    async with Upstream(first_held) as upstream:
        http = client()
        try:
            call = asyncio.ensure_future(http.request("POST", upstream.url, [], body()))
            await held.wait()
            await cancelled(call)
            await upstream.until(lambda: upstream.closed == 1)  # that connection, not the spare
            response = await http.request("POST", upstream.url, [], body())
            assert await response.read() == b"ok"
            response.close()
        finally:
            await http.aclose()


async def test_cancelled_mid_body_the_rest_never_answers_another_request() -> None:
    first_part = asyncio.Event()

    async def streams(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        if first_part.is_set():  # a later request
            writer.write(OK)
            await writer.drain()
            return
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n")
        await writer.drain()
        first_part.set()
        await reader.read()  # the rest never comes; the client hangs up

    async with Upstream(streams) as upstream:
        http = client()
        try:
            response = await http.request("POST", upstream.url, [], body())
            chunks = response.chunks()
            assert await anext(chunks) == b"abc"
            reading = asyncio.ensure_future(anext(chunks))
            await asyncio.sleep(0)  # waiting for the next chunk
            await cancelled(reading)
            response.close()
            await upstream.until(lambda: upstream.closed == 1)
            again = await http.request("POST", upstream.url, [], body())
            assert await again.read() == b"ok"
            again.close()
        finally:
            await http.aclose()


async def test_a_response_not_read_to_its_end_is_not_pooled() -> None:
    async with Upstream() as upstream:
        http = client()
        try:
            response = await http.request("POST", upstream.url, [], body())
            response.close()  # its "ok" may have arrived, but was never read
            await upstream.until(lambda: upstream.closed == 1)
            assert not any(conn.asked for idle in http._idle.values() for conn in idle)
        finally:
            await http.aclose()

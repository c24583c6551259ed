"""One inference request at the ASGI level: errors, uploads cut short, clients hanging up."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import cast

import pytest

from kinference.gateway.errors import GatewayError
from kinference.gateway.exchange import ClientDisconnect, Exchange
from kinference.gateway.flow import Incoming
from kinference.gateway.hooks import PassThrough
from kinference.gateway.http1 import Broken, HttpClient, Response
from kinference.gateway.relay import Relay
from kinference.gateway.timing import TokenClock
from tests.gateway.counting_upstream import Upstream, body, read_request
from tests.gateway.fakes_asgi import Client, FakeFlow, fake_gateway, scope

ROUTE = "chat"


def count(exchange: Exchange, status: int) -> float:
    child = exchange.gateway.metrics.requests.labels(ROUTE, "none", str(status))
    value: float = child._value.get()
    return value


async def read_all(incoming: Incoming) -> list[bytes]:
    return [chunk async for chunk in incoming.body]


async def test_the_flows_error_is_answered_with_the_request_id() -> None:
    async def refuse(incoming: Incoming) -> Relay:
        await read_all(incoming)
        raise GatewayError(429, "over_budget", "tenant over budget")

    gateway, _ = fake_gateway(flow=FakeFlow(refuse))
    client = Client({"type": "http.request", "body": b"{}", "more_body": False})
    asked = scope("POST", "/v1/chat/completions", [(b"x-request-id", b"r-1")])
    exchange = Exchange(gateway, asked, client.receive, client.send, ROUTE)
    await exchange.run()
    assert client.status == 429 and client.headers[b"x-request-id"] == b"r-1"
    assert json.loads(client.body)["error"]["code"] == "over_budget"
    assert count(exchange, 429) == 1


async def test_the_body_arrives_in_order_and_a_cut_upload_counts_499() -> None:
    seen: list[list[bytes]] = []

    async def read(incoming: Incoming) -> Relay:
        chunks: list[bytes] = []
        try:
            async for chunk in incoming.body:
                chunks.append(chunk)
        finally:
            seen.append(chunks)
        raise AssertionError("the body never ends")

    gateway, _ = fake_gateway(flow=FakeFlow(read))
    client = Client(
        {"type": "http.request", "body": b"a", "more_body": True},
        {"type": "http.request", "body": b"", "more_body": True},
        {"type": "http.request", "body": b"b", "more_body": True},
        {"type": "http.disconnect"},
    )
    exchange = Exchange(gateway, scope("POST", "/v1/chat/completions"), client.receive,
                        client.send, ROUTE)  # fmt: skip
    await exchange.run()
    assert seen == [[b"a", b"b"]]  # empty messages are no chunks
    assert client.sent == [] and count(exchange, 499) == 1
    assert issubclass(ClientDisconnect, Exception)


async def test_a_client_hanging_up_after_its_body_cancels_the_request() -> None:
    cancelled = asyncio.Event()

    async def wait_forever(incoming: Incoming) -> Relay:
        await read_all(incoming)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    gateway, _ = fake_gateway(flow=FakeFlow(wait_forever))
    client = Client({"type": "http.request", "body": b"{}", "more_body": False})
    client.incoming.put_nowait({"type": "http.disconnect"})  # read by the watcher
    exchange = Exchange(gateway, scope("POST", "/v1/chat/completions"), client.receive,
                        client.send, ROUTE)  # fmt: skip
    await exchange.run()  # returns: the cancellation was its own, not the server's
    assert cancelled.is_set() and exchange.gone and client.sent == []


async def test_a_cancellation_from_outside_still_propagates() -> None:
    started = asyncio.Event()

    async def wait_forever(incoming: Incoming) -> Relay:
        await read_all(incoming)
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    gateway, _ = fake_gateway(flow=FakeFlow(wait_forever))
    client = Client({"type": "http.request", "body": b"{}", "more_body": False})

    async def serve() -> None:
        exchange = Exchange(gateway, scope("POST", "/v1/chat/completions"), client.receive,
                            client.send, ROUTE)  # fmt: skip
        await exchange.run()

    task = asyncio.create_task(serve())
    await started.wait()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("the server's cancellation was swallowed")


class _CutUpstream:
    """An `http1.Response` whose body breaks off after its first bytes."""

    def __init__(self) -> None:
        self.status = 200
        self.headers = [("content-type", "application/json")]
        self.drained = False
        self.decoded = False
        self.closed = False

    def header(self, name: str) -> str:
        return dict(self.headers).get(name, "")

    async def chunks(self) -> AsyncIterator[bytes]:
        yield b'{"id":'
        raise Broken("the upstream closed the connection mid-response")

    def close(self) -> None:
        self.closed = True


class _Reports:
    def first_token(self, ttft_ms: int, upstream_status: int) -> None:
        pass

    def final(self, usage: object, clock: object, fallback_model: str) -> None:
        raise AssertionError("not complete")

    def abort(self, reason: int, detail: str) -> None:
        self.aborted = detail


async def test_an_upstream_failing_before_a_rewritten_whole_body_is_sent_is_a_502() -> None:
    """A transformed whole body is read before its head goes out: an upstream failing then
    is the gateway's 502 JSON, not an exception for the server to answer with a 500."""
    upstream, reports = _CutUpstream(), _Reports()

    async def relay(incoming: Incoming) -> Relay:
        await read_all(incoming)
        response = cast(Response, upstream)
        return Relay(response, TokenClock(), reports, fallback_model="m", transform=PassThrough(),
                     max_whole_bytes=1 << 20)  # fmt: skip

    gateway, _ = fake_gateway(flow=FakeFlow(relay))
    client = Client({"type": "http.request", "body": b"{}", "more_body": False})
    exchange = Exchange(gateway, scope("POST", "/v1/chat/completions"), client.receive,
                        client.send, ROUTE)  # fmt: skip
    await exchange.run()
    assert client.status == 502 and json.loads(client.body)["error"]["code"] == "upstream_error"
    assert upstream.closed and "mid-response" in reports.aborted


@pytest.mark.parametrize("framing", ["chunked", "content-length"])
async def test_a_rewritten_whole_body_past_the_limit_is_a_502_and_closes_the_upstream(
    framing: str,
) -> None:
    """The body a transform rewrites is held whole: an upstream sending more than
    its `max_whole_bytes` (the gateway's `max_body_bytes`; before: without bound) fails the
    request as other upstream failures do, and its connection is closed (at once when its
    length says so)."""
    piece = b"x" * 16 * 1024

    async def large(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        if framing == "chunked":
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            for _ in range(64):
                writer.write(b"4000\r\n" + piece + b"\r\n")
                await writer.drain()
            writer.write(b"0\r\n\r\n")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % (64 * len(piece)))
            for _ in range(64):
                writer.write(piece)
                await writer.drain()
        await writer.drain()

    reports = _Reports()
    async with Upstream(large) as upstream:
        http = HttpClient(connect_timeout_s=2.0, read_timeout_s=10.0)

        async def relay(incoming: Incoming) -> Relay:
            await read_all(incoming)
            response = await http.request("POST", upstream.url, [("content-length", "0")], body())
            return Relay(response, TokenClock(), reports, fallback_model="m",
                         transform=PassThrough(), max_whole_bytes=64 * 1024)  # fmt: skip

        gateway, _ = fake_gateway(flow=FakeFlow(relay))
        client = Client({"type": "http.request", "body": b"{}", "more_body": False})
        exchange = Exchange(gateway, scope("POST", "/v1/chat/completions"), client.receive,
                            client.send, ROUTE)  # fmt: skip
        try:
            await exchange.run()
            assert client.status == 502
            assert json.loads(client.body)["error"]["code"] == "upstream_error"
            assert "over 65536 bytes" in reports.aborted
            await upstream.until(lambda: upstream.open == 0)
        finally:
            await http.aclose()

"""One inference request at the ASGI level: errors, uploads cut short, clients hanging up."""

from __future__ import annotations

import asyncio
import json

from kinference.gateway.errors import GatewayError
from kinference.gateway.exchange import ClientDisconnect, Exchange
from kinference.gateway.flow import Incoming
from kinference.gateway.relay import Relay
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

"""A `Gateway` over fakes and an ASGI client double, for the routes' unit tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

from prometheus_client import CollectorRegistry

from kinference.gateway.asgi import Gateway
from kinference.gateway.flow import Flow, Incoming
from kinference.gateway.http1 import HttpClient
from kinference.gateway.metrics import GatewayMetrics
from kinference.gateway.port import PickerPort
from kinference.gateway.relay import Relay
from kinference.gateway.request_ids import RequestIds
from kinference.gateway.settings import GatewaySettings


class FakePicker:
    def __init__(self, serving: bool = True, names: tuple[str, ...] | None = None) -> None:
        self._serving = serving
        self._names = names

    async def serving(self) -> bool:
        return self._serving

    def model_names(self) -> tuple[str, ...] | None:
        return self._names


class FakeFlow:
    """`Flow.run` replaced by `behaviour`, which gets the request as the gateway built it."""

    def __init__(self, behaviour: Callable[[Incoming], Awaitable[Relay]]) -> None:
        self.behaviour = behaviour
        self.seen: list[Incoming] = []

    async def run(self, incoming: Incoming) -> Relay:
        self.seen.append(incoming)
        return await self.behaviour(incoming)


def fake_gateway(
    *, picker: FakePicker | None = None, flow: FakeFlow | None = None, models: str = ""
) -> tuple[Gateway, CollectorRegistry]:
    registry = CollectorRegistry()
    gateway = Gateway(
        settings=GatewaySettings(models=models),
        picker=cast(PickerPort, picker or FakePicker()),
        http=HttpClient(connect_timeout_s=1.0, read_timeout_s=1.0),
        flow=cast(Flow, flow),
        metrics=GatewayMetrics(registry),
        ids=RequestIds(),
    )
    return gateway, registry


class Client:
    """What uvicorn hands the app: `receive` from a queue, `send` into a list."""

    def __init__(self, *messages: dict[str, Any]) -> None:
        self.incoming: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for message in messages:
            self.incoming.put_nowait(message)
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        return await self.incoming.get()

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    @property
    def headers(self) -> dict[bytes, bytes]:
        return dict(self.sent[0]["headers"])

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent[1:])


def scope(method: str, path: str, headers: list[tuple[bytes, bytes]] | None = None) -> Any:
    return {"type": "http", "method": method, "path": path, "headers": headers or []}

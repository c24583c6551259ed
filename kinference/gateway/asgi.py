"""What the gateway's routes share: the ASGI types, the `Gateway` they serve with, and whole
responses (a JSON document, an error) sent in one head and one body message."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kinference.gateway.errors import GatewayError
from kinference.gateway.flow import Flow
from kinference.gateway.http1 import HttpClient
from kinference.gateway.metrics import GatewayMetrics
from kinference.gateway.port import PickerPort
from kinference.gateway.request_ids import RequestIds
from kinference.gateway.settings import GatewaySettings

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]

_JSON = (b"content-type", b"application/json")


@dataclass
class Gateway:
    """What the routes use; built in the lifespan, inside the serving event loop."""

    settings: GatewaySettings
    picker: PickerPort
    http: HttpClient
    flow: Flow
    metrics: GatewayMetrics
    ids: RequestIds


async def send_json(send: Send, status: int, document: object) -> None:
    await send_whole(send, status, [_JSON], json.dumps(document).encode())


async def send_error(
    send: Send,
    error: GatewayError,
    request_id: str,
    extra: Mapping[str, str] | None = None,
    *,
    path: str = "",
) -> None:
    """The error JSON, in Anthropic's shape on its Messages path (errors.anthropic_path)."""
    headers = [_JSON, (b"x-request-id", request_id.encode())]
    for name, value in {**error.headers, **(extra or {})}.items():
        headers.append((name.lower().encode("latin-1"), value.encode("latin-1")))
    await send_whole(send, error.status, headers, error.body(path))


async def send_whole(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    """A response whose body is all at hand: its length in the head, then the body."""
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})

"""The routes the gateway answers itself, without consuming a pick.

`GET /health` (and `/healthz`) says whether the picker takes requests; `GET /v1/models`
(and `/v1/models/{id}`) lists the models and aliases the policy serves; `GET /metrics` is
the Prometheus exposition. Anything else that is not an inference path answers 404 (405
for a known path with another method).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from kinference.gateway.asgi import Gateway, Scope, Send, send_error, send_json, send_whole
from kinference.gateway.errors import GatewayError
from kinference.gateway.routes import OTHER_ROUTE

GET_ROUTES = frozenset({"/health", "/healthz", "/v1/models", "/metrics"})


def is_get_route(path: str) -> bool:
    """Whether `path` is one of the routes below (for GET and HEAD)."""
    return path in GET_ROUTES or path.startswith("/v1/models/")


async def answer_get(
    gateway: Gateway, registry: CollectorRegistry, path: str, scope: Scope, send: Send
) -> None:
    """Health, metrics or models (`path` passed `is_get_route`)."""
    if path in ("/health", "/healthz"):
        ok = await gateway.picker.serving()
        body = {"status": "ok"} if ok else {"status": "picker not serving"}
        await send_json(send, 200 if ok else 503, body)
    elif path == "/metrics":
        data = generate_latest(registry)
        await send_whole(send, 200, [(b"content-type", CONTENT_TYPE_LATEST.encode())], data)
    else:
        await _models(gateway, path, scope, send)


async def answer_unrouted(
    gateway: Gateway, method: str, path: str, scope: Scope, send: Send, *, inference: bool
) -> None:
    """405 for a known path asked with the wrong method, 404 for any other."""
    allowed = "POST" if inference else "GET" if path in GET_ROUTES else None
    error = (
        GatewayError(405, "method_not_allowed", f"{method} {path}: use {allowed}")
        if allowed
        else GatewayError(404, "not_found", f"no route {method} {path[:200]}")
    )
    headers = {"allow": allowed} if allowed else {}
    await send_error(send, error, gateway.ids.of(scope), headers, path=path)
    gateway.metrics.answered(OTHER_ROUTE, "none", error.status, 0.0)


def model_names(gateway: Gateway) -> tuple[str, ...]:
    """`KINFERENCE_GATEWAY_MODELS` when set, else every name and alias of the policy."""
    if gateway.settings.model_ids:
        return gateway.settings.model_ids
    return gateway.picker.model_names() or ()


async def _models(gateway: Gateway, path: str, scope: Scope, send: Send) -> None:
    names = model_names(gateway)
    if path == "/v1/models":
        await send_json(send, 200, {"object": "list", "data": [_model(n) for n in names]})
        return
    wanted = path.removeprefix("/v1/models/")
    if wanted in names:
        await send_json(send, 200, _model(wanted))
        return
    error = GatewayError(404, "model_not_found", f"the model {wanted[:200]!r} does not exist")
    await send_error(send, error, gateway.ids.of(scope))


def _model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "kinference"}

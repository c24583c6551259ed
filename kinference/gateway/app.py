"""The gateway's HTTP surface (Starlette) and its composition: one picker channel, one pool.

Routes: `POST /<any path>` runs the picker flow (the picker tells the request shape from the
body); `GET /healthz` asks the picker's gRPC health service; `GET /v1/models` lists the
configured model ids when `KINFERENCE_GATEWAY_MODELS` is set (the picker has no RPC for
its models, so the route is absent otherwise).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from kinference.client import PickerClient
from kinference.gateway.backends import Backend
from kinference.gateway.callers import ApiKeys, CallerResolver
from kinference.gateway.errors import GatewayError
from kinference.gateway.flow import Flow, Incoming
from kinference.gateway.relay import Relay
from kinference.gateway.reports import Reporter
from kinference.gateway.settings import GatewaySettings

_MAX_REQUEST_ID = 128  # a longer client x-request-id is replaced, not forwarded
_PICKER_SERVICE = "kinference.v1.Picker"


@dataclass
class Gateway:
    """What the routes use; built in the lifespan, inside the serving event loop."""

    settings: GatewaySettings
    picker: PickerClient
    http: httpx.AsyncClient
    reporter: Reporter
    flow: Flow


class RelayResponse(StreamingResponse):
    """Streams a `Relay` and always finishes it, even when the client went away."""

    def __init__(self, relay: Relay, request_id: str) -> None:
        self._relay = relay
        self._chunks = relay.body()
        headers = {**relay.headers, "x-request-id": request_id}
        super().__init__(self._chunks, status_code=relay.status, headers=headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._chunks.aclose()  # a disconnect may leave it parked at a yield
            self._relay.finish()


def build_app(
    settings: GatewaySettings, backends: Mapping[str, Backend], api_keys: ApiKeys | None
) -> Starlette:
    """The ASGI app; its lifespan opens the picker channel and the upstream pool."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        gateway = _open(settings, backends, api_keys)
        app.state.gateway = gateway
        try:
            yield
        finally:
            await gateway.reporter.aclose()
            await gateway.http.aclose()
            await gateway.picker.close()

    routes = [Route(path, _healthz, methods=["GET"]) for path in ("/health", "/healthz")]
    if settings.model_ids:
        routes.append(Route("/v1/models", _models, methods=["GET"]))
    routes.append(Route("/{path:path}", _proxy, methods=["POST"]))
    routes.append(Route("/{path:path}", _not_found, methods=["GET"]))
    handlers = {HTTPException: _http_error}
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)


def _open(
    settings: GatewaySettings, backends: Mapping[str, Backend], api_keys: ApiKeys | None
) -> Gateway:
    picker = PickerClient(settings.picker)
    timeout = httpx.Timeout(
        connect=settings.connect_timeout_s,
        read=settings.read_timeout_s,
        write=settings.read_timeout_s,
        pool=settings.connect_timeout_s,
    )
    # Keep-alive to every upstream; no environment proxies, so traffic goes where picked.
    http = httpx.AsyncClient(
        timeout=timeout,
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        trust_env=False,
    )
    reporter = Reporter(picker, settings.rpc_timeout_s)
    flow = Flow(
        picker=picker,
        http=http,
        backends=backends,
        callers=CallerResolver(api_keys, settings.tenant_header, settings.qos_header),
        reporter=reporter,
        pool=settings.pool_ref,
        rpc_timeout_s=settings.rpc_timeout_s,
        max_body_bytes=settings.max_body_bytes,
    )
    return Gateway(settings, picker, http, reporter, flow)


async def _proxy(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    request_id = _request_id(request)
    scope = request.scope
    incoming = Incoming(
        method=request.method,
        path=(scope.get("raw_path") or scope["path"].encode()).decode("latin-1"),
        query=scope.get("query_string", b"").decode("latin-1"),
        headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]],
        body=request.stream(),
        request_id=request_id,
    )
    try:
        relay = await gateway.flow.run(incoming)
    except GatewayError as error:
        return error_response(error, request_id, incoming.path)
    except ClientDisconnect:  # the client went away mid-upload; nobody reads this
        gone = GatewayError(499, "client_closed_request", "gone")
        return error_response(gone, request_id, incoming.path)
    return RelayResponse(relay, request_id)


def error_response(error: GatewayError, request_id: str, path: str = "") -> Response:
    headers = {**error.headers, "x-request-id": request_id}
    return Response(error.body(path), error.status, headers, media_type="application/json")


async def _not_found(request: Request) -> Response:
    error = GatewayError(404, "not_found", f"no GET route {request.url.path}")
    return error_response(error, _request_id(request))


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (405, ...) in the same JSON shape as ours."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    error = GatewayError(status, "http_error", str(getattr(exc, "detail", "")) or "refused")
    return error_response(error, _request_id(request))


def _request_id(request: Request) -> str:
    given = request.headers.get("x-request-id", "")
    if given and len(given) <= _MAX_REQUEST_ID and given.isprintable() and given.isascii():
        return given
    return uuid.uuid4().hex


async def _healthz(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    stub = health_pb2_grpc.HealthStub(gateway.picker.channel)
    check = health_pb2.HealthCheckRequest(service=_PICKER_SERVICE)
    try:
        answer = await stub.Check(check, timeout=gateway.settings.rpc_timeout_s)
    except grpc.aio.AioRpcError as error:
        return JSONResponse({"status": "picker unreachable", "code": error.code().name}, 503)
    if answer.status != health_pb2.HealthCheckResponse.SERVING:
        return JSONResponse({"status": "picker not serving"}, 503)
    return JSONResponse({"status": "ok"})


async def _models(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    data = [
        {"id": name, "object": "model", "created": 0, "owned_by": "kinference"}
        for name in gateway.settings.model_ids
    ]
    return JSONResponse({"object": "list", "data": data})

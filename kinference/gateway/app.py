"""The gateway's HTTP surface, a plain ASGI app (served by uvicorn with httptools).

Routes: `POST` to an inference path (kinference.gateway.routes) runs the picker flow;
`GET /health` (and `/healthz`) says whether the picker takes requests; `GET /v1/models`
(and `/v1/models/{id}`) lists the models and aliases the policy serves; `GET /metrics` is
the Prometheus exposition. Anything else answers 404 (405 for a known path with another
method) at the gateway, without consuming a pick.

No web framework sits in between: Starlette's routing, request objects and its per-response
task group cost more CPU than the rest of the gateway's own code (profile in docs/gateway.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from kinference.gateway.backends import Backend
from kinference.gateway.callers import ApiKeys, CallerResolver
from kinference.gateway.errors import GatewayError
from kinference.gateway.flow import Flow, Incoming
from kinference.gateway.hooks import Transforms
from kinference.gateway.http1 import HttpClient
from kinference.gateway.metrics import GatewayMetrics
from kinference.gateway.port import PickerPort
from kinference.gateway.relay import Relay
from kinference.gateway.request_ids import RequestIds
from kinference.gateway.routes import OTHER_ROUTE, inference_route
from kinference.gateway.settings import GatewaySettings
from kinference.gateway.timing import TokenClock
from kinference.gateway.translate import translate_response
from kinference.gateway.usage import Usage
from kinference.gateway.usage_chunk import hide_added_usage

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]
PickerOpener = Callable[[], AbstractAsyncContextManager[PickerPort]]

_JSON = (b"content-type", b"application/json")
# Seconds after its body arrived from which a request watches for its client hanging up.
WATCH_AFTER_S = 0.05
_GET_ROUTES = frozenset({"/health", "/healthz", "/v1/models", "/metrics"})


class ClientDisconnect(Exception):
    """The client went away before its body was complete."""


def default_transforms() -> Transforms:
    """The response transforms every relayed response goes through, in order.

    API-shape translation (kinference.gateway.translate) goes before `hide_added_usage`,
    which must stay last: it drops the accounting usage chunk from whatever ends up
    OpenAI-shaped.
    """
    return Transforms([translate_response, hide_added_usage])


@dataclass
class Gateway:
    """What the routes use; built in the lifespan, inside the serving event loop."""

    settings: GatewaySettings
    picker: PickerPort
    http: HttpClient
    flow: Flow
    metrics: GatewayMetrics
    ids: RequestIds


class GatewayApp:
    """The ASGI application; its lifespan opens the picker and the upstream client."""

    def __init__(
        self,
        settings: GatewaySettings,
        backends: Mapping[str, Backend],
        api_keys: ApiKeys | None,
        *,
        picker: PickerOpener,
        registry: CollectorRegistry,
        transforms: Transforms | None = None,
    ) -> None:
        self.settings = settings
        self._backends = backends
        self._api_keys = api_keys
        self._open_picker = picker
        self.registry = registry
        self.metrics = GatewayMetrics(registry)
        self.transforms = transforms or default_transforms()
        self.ids = RequestIds()
        self.gateway: Gateway | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        assert message["type"] == "lifespan.startup"
        async with contextlib.AsyncExitStack() as stack:
            try:
                picker = await stack.enter_async_context(self._open_picker())
                self.gateway = self._build(picker)
                stack.push_async_callback(self.gateway.http.aclose)
            except Exception as exc:
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                raise
            await send({"type": "lifespan.startup.complete"})
            message = await receive()
        self.gateway = None
        await send({"type": "lifespan.shutdown.complete"})

    def _build(self, picker: PickerPort) -> Gateway:
        settings = self.settings
        http = HttpClient(
            connect_timeout_s=settings.connect_timeout_s, read_timeout_s=settings.read_timeout_s
        )
        flow = Flow(
            picker=picker,
            http=http,
            backends=self._backends,
            callers=CallerResolver(self._api_keys, settings.tenant_header, settings.qos_header),
            transforms=self.transforms,
            pool=settings.pool_ref,
            rpc_timeout_s=settings.rpc_timeout_s,
            max_body_bytes=settings.max_body_bytes,
        )
        return Gateway(settings, picker, http, flow, self.metrics, self.ids)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        gateway = self.gateway
        assert gateway is not None, "lifespan not started"
        path, method = scope["path"], scope["method"]
        route = inference_route(path)
        if route is not None and method == "POST":
            await _Exchange(gateway, scope, receive, send, route).run()
        elif method in ("GET", "HEAD") and (path in _GET_ROUTES or path.startswith("/v1/models/")):
            await self._get(gateway, path, scope, send)
        else:
            allowed = "POST" if route is not None else "GET" if path in _GET_ROUTES else None
            error = (
                GatewayError(405, "method_not_allowed", f"{method} {path}: use {allowed}")
                if allowed
                else GatewayError(404, "not_found", f"no route {method} {path[:200]}")
            )
            headers = {"allow": allowed} if allowed else {}
            await _send_error(send, error, self.ids.of(scope), headers, path=path)
            self.metrics.answered(OTHER_ROUTE, "none", error.status, 0.0)

    async def _get(self, gateway: Gateway, path: str, scope: Scope, send: Send) -> None:
        if path in ("/health", "/healthz"):
            ok = await gateway.picker.serving()
            body = {"status": "ok"} if ok else {"status": "picker not serving"}
            await _send_json(send, 200 if ok else 503, body)
        elif path == "/metrics":
            data = generate_latest(self.registry)
            await _send(send, 200, [(b"content-type", CONTENT_TYPE_LATEST.encode())], data)
        else:
            await self._models(gateway, path, scope, send)

    async def _models(self, gateway: Gateway, path: str, scope: Scope, send: Send) -> None:
        names = self.model_names(gateway)
        if path == "/v1/models":
            await _send_json(send, 200, {"object": "list", "data": [_model(n) for n in names]})
            return
        wanted = path.removeprefix("/v1/models/")
        if wanted in names:
            await _send_json(send, 200, _model(wanted))
            return
        error = GatewayError(404, "model_not_found", f"the model {wanted[:200]!r} does not exist")
        await _send_error(send, error, self.ids.of(scope))

    def model_names(self, gateway: Gateway) -> tuple[str, ...]:
        """`KINFERENCE_GATEWAY_MODELS` when set, else every name and alias of the policy."""
        if gateway.settings.model_ids:
            return gateway.settings.model_ids
        return gateway.picker.model_names() or ()


def build_app(
    settings: GatewaySettings,
    backends: Mapping[str, Backend],
    api_keys: ApiKeys | None,
    *,
    picker: PickerOpener | None = None,
    registry: CollectorRegistry | None = None,
) -> GatewayApp:
    """The gateway app; without `picker`, a channel to `settings.picker` (remote mode)."""
    if picker is None:
        from kinference.gateway.embedded import remote_picker

        if settings.in_process:
            raise ValueError("in-process mode needs the hosted picker's opener")
        picker = lambda: remote_picker(settings)  # noqa: E731
    return GatewayApp(
        settings, backends, api_keys, picker=picker, registry=registry or CollectorRegistry()
    )


class _Exchange:
    """One inference request: the flow, the relayed response and the client's hang-up."""

    def __init__(
        self, gateway: Gateway, scope: Scope, receive: Receive, send: Send, route: str
    ) -> None:
        self.gateway = gateway
        self.scope = scope
        self.receive = receive
        self.send = send
        self.route = route
        self.started = time.perf_counter()
        self.model = "none"
        self._task = asyncio.current_task()
        self._watcher: asyncio.Future[Any] | None = None
        self._watch_timer: asyncio.TimerHandle | None = None
        self._done = False
        self.gone = False

    async def run(self) -> None:
        try:
            await self._serve(self.gateway.ids.of(self.scope))
        except asyncio.CancelledError:
            if not self.gone or self._task is None:
                raise
            self._task.uncancel()  # our own cancellation: the client hung up
        finally:
            self._done = True
            if self._watch_timer is not None:
                self._watch_timer.cancel()
            if self._watcher is not None:
                self._watcher.cancel()

    async def _serve(self, request_id: str) -> None:
        scope = self.scope
        incoming = Incoming(
            method=scope["method"],
            path=(scope.get("raw_path") or scope["path"].encode()).decode("latin-1"),
            query=scope.get("query_string", b"").decode("latin-1"),
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]],
            body=self._body(),
            request_id=request_id,
            on_finish=self._finished,
        )
        try:
            relay = await self.gateway.flow.run(incoming)
        except GatewayError as error:
            await self._error(error, request_id)
            return
        except ClientDisconnect:  # the client went away mid-upload; nobody reads this
            self.gateway.metrics.answered(self.route, "none", 499, self._elapsed())
            return
        self.model = self.gateway.metrics.models.label(relay.model, True)
        await self._relay(relay, request_id)

    async def _relay(self, relay: Relay, request_id: str) -> None:
        try:
            await relay.start()
            headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in relay.headers]
            headers.append((b"x-request-id", request_id.encode()))
            send = self.send
            await send({"type": "http.response.start", "status": relay.status, "headers": headers})
            ended = False
            async for chunk in relay.body():
                ended = relay.ending  # the last chunk and the end of the body: one write
                await send({"type": "http.response.body", "body": chunk, "more_body": not ended})
            if not ended:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            relay.finish()

    async def _body(self) -> AsyncIterator[bytes]:
        receive = self.receive
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnect
            body = message.get("body", b"")
            more = message.get("more_body", False)
            if not more:
                self._watch()
            if body:
                yield body
            if not more:
                return

    def _watch(self) -> None:
        """From the end of the body on, a client that hangs up cancels the request: once it
        has been under way for `WATCH_AFTER_S` (a request answered sooner never pays for the
        watching task; a hang-up before then is noticed then)."""
        loop = asyncio.get_running_loop()
        self._watch_timer = loop.call_later(WATCH_AFTER_S, self._start_watching)

    def _start_watching(self) -> None:
        self._watch_timer = None
        if self._done:
            return
        self._watcher = asyncio.ensure_future(self.receive())
        self._watcher.add_done_callback(self._hung_up)

    def _hung_up(self, watcher: asyncio.Future[Any]) -> None:
        if self._done or watcher.cancelled() or self._task is None:
            return
        self.gone = True
        self._task.cancel()

    async def _error(self, error: GatewayError, request_id: str) -> None:
        await _send_error(self.send, error, request_id, path=self.scope["path"])
        self.gateway.metrics.answered(self.route, self.model, error.status, self._elapsed())

    def _finished(self, status: int, usage: Usage | None, clock: TokenClock) -> None:
        self.gateway.metrics.relayed(
            self.route, self.model, status, self._elapsed(), usage=usage, clock=clock
        )

    def _elapsed(self) -> float:
        return time.perf_counter() - self.started


def _model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "kinference"}


async def _send_json(send: Send, status: int, document: object) -> None:
    await _send(send, status, [_JSON], json.dumps(document).encode())


async def _send_error(
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
    await _send(send, error.status, headers, error.body(path))


async def _send(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})

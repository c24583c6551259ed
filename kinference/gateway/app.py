"""The gateway's HTTP surface, a plain ASGI app (served by uvicorn with httptools).

Routes: `POST` to an inference path (kinference.gateway.routes) is one `Exchange`
(kinference.gateway.exchange: the picker flow and the relayed response); health, models,
metrics and the 404/405 answers are the gateway's own (kinference.gateway.own_routes). The
lifespan opens the picker (in-process or remote) and the upstream client.

No web framework sits in between: Starlette's routing, request objects and its per-response
task group cost more CPU than the rest of the gateway's own code (profile in docs/gateway.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager

from prometheus_client import CollectorRegistry

from kinference.gateway.asgi import Gateway, Receive, Scope, Send
from kinference.gateway.backends import Backend
from kinference.gateway.callers import ApiKeys, CallerResolver
from kinference.gateway.exchange import Exchange
from kinference.gateway.flow import Flow
from kinference.gateway.hooks import Transforms
from kinference.gateway.http1 import HttpClient
from kinference.gateway.metrics import GatewayMetrics
from kinference.gateway.own_routes import answer_get, answer_unrouted, is_get_route
from kinference.gateway.port import PickerPort
from kinference.gateway.request_ids import RequestIds
from kinference.gateway.routes import inference_route
from kinference.gateway.settings import GatewaySettings
from kinference.gateway.translate import translate_response
from kinference.gateway.usage_chunk import hide_added_usage

PickerOpener = Callable[[], AbstractAsyncContextManager[PickerPort]]


def default_transforms() -> Transforms:
    """The response transforms every relayed response goes through, in order.

    API-shape translation (kinference.gateway.translate) goes before `hide_added_usage`,
    which must stay last: it drops the accounting usage chunk from whatever ends up
    OpenAI-shaped.
    """
    return Transforms([translate_response, hide_added_usage])


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
            connect_timeout_s=settings.connect_timeout_s,
            read_timeout_s=settings.read_timeout_s,
            keep_spare=True,
            replay_budget=settings.max_body_bytes,
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
            body_time_s=settings.body_total_timeout_s,
        )
        return Gateway(settings, picker, http, flow, self.metrics, self.ids)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        gateway = self.gateway
        assert gateway is not None, "lifespan not started"
        path, method = scope["path"], scope["method"]
        route = inference_route(path)
        if route is not None and method == "POST":
            await Exchange(gateway, scope, receive, send, route).run()
        elif method in ("GET", "HEAD") and is_get_route(path):
            await answer_get(gateway, self.registry, path, scope, send)
        else:
            inference = route is not None
            await answer_unrouted(gateway, method, path, scope, send, inference=inference)


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

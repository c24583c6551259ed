"""One request through the picker: PushBody as the body arrives, Pick, PullBody upstream.

`Flow.run` ends with the upstream's response headers in hand (a `Relay` to stream the rest)
or with a `GatewayError`. Every failure after a pick that dispatches sends the fitting Abort
first, so the picker never counts a dead request as load until its TTL.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import grpc

from kinference.api.extensions import PickExtras
from kinference.gateway import errors
from kinference.gateway.backends import Backend, CredentialMissing
from kinference.gateway.callers import Caller, CallerRejected, CallerResolver
from kinference.gateway.errors import GatewayError
from kinference.gateway.hooks import Exchange, Transforms
from kinference.gateway.http1 import (
    ConnectFailed,
    HttpClient,
    ReadTimeout,
    Response,
    UpstreamError,
)
from kinference.gateway.port import AbortReason, PickAsk, Picked, PickerPort, Reports
from kinference.gateway.relay import FinishObserver, Relay
from kinference.gateway.timing import TokenClock
from kinference.gateway.upload import BodyCut, Upload
from kinference.gateway.upstream import BackendUnresolved, Target, request_headers, resolve
from kinference.v1 import picker_pb2 as pb

log = logging.getLogger(__name__)

_UNAUTHORIZED = frozenset({401, 403})


@dataclass
class Incoming:
    """What the HTTP layer hands over: the request line, headers and the body as it arrives."""

    method: str
    path: str
    query: str
    headers: list[tuple[str, str]]  # names lower-case, as ASGI gives them
    body: AsyncIterator[bytes]
    request_id: str
    header_map: dict[str, str] = field(default_factory=dict)  # first value of each name
    # Told when the relay finishes: the HTTP layer's metrics (status, usage, timing).
    on_finish: FinishObserver | None = None
    # The body when it arrived whole with its head, else None (then `body` yields all of
    # it); taken before `body` is iterated, if at all.
    whole: Callable[[], Awaitable[bytes | None]] | None = None

    def __post_init__(self) -> None:
        if not self.header_map:
            self.header_map = dict(reversed(self.headers))


@dataclass
class Pushed:
    """What the gateway learnt from the client's body while pushing it."""

    stream_id: int
    asked_usage: bool
    picked: Picked | None = None  # the picker picked at the half-close: no Pick call


class PullMismatch(Exception):
    """PullBody ended with a byte count other than the pick's `body_total_bytes`."""


class Flow:
    """The per-request flow over the gateway's shared picker client and HTTP client."""

    def __init__(
        self,
        *,
        picker: PickerPort,
        http: HttpClient,
        backends: Mapping[str, Backend],
        callers: CallerResolver,
        transforms: Transforms,
        pool: tuple[str, str] | None,
        rpc_timeout_s: float,
        max_body_bytes: int,
        body_time_s: float | None = None,
    ) -> None:
        """`body_time_s`: the longest a body may take to arrive (None: unbounded)."""
        self._picker = picker
        self._http = http
        self._backends = backends
        self._callers = callers
        self._transforms = transforms
        self._pool = pool
        self._rpc_timeout_s = rpc_timeout_s
        self._max_body_bytes = max_body_bytes
        self._body_time_s = body_time_s
        self._own_headers = (callers.tenant_header, callers.qos_header)

    async def run(self, incoming: Incoming) -> Relay:
        """Raises `GatewayError` for anything the client should get as an error JSON."""
        try:
            caller = self._callers.resolve(incoming.header_map)
        except CallerRejected as exc:
            raise GatewayError(exc.status, exc.code, str(exc)) from None
        pushed, (pick, extras) = await self._push_and_pick(incoming, caller)
        if pick.response_id == 0 or pick.WhichOneof("destination") is None:
            raise errors.outcome_error(pick, extras)
        reports = self._picker.reports(pick.response_id)
        try:
            return await self._dispatch(pick, extras, pushed, incoming, reports)
        except GatewayError:
            raise  # its Abort went out where it was raised
        except BaseException:
            detail = "the request ended before the upstream answered"
            reports.abort(pb.AbortRequest.REASON_UNSPECIFIED, detail)
            raise

    async def _push_and_pick(self, incoming: Incoming, caller: Caller) -> tuple[Pushed, Picked]:
        ask = PickAsk(caller.tenant, caller.qos, self._pool, incoming.request_id)
        pushed = await self._push(incoming, ask)
        if pushed.picked is not None:
            return pushed, pushed.picked
        try:
            async with asyncio.timeout(self._rpc_timeout_s):
                return pushed, await self._picker.pick(pushed.stream_id, ask)
        except grpc.aio.AioRpcError as error:
            raise errors.rpc_error(error, "pick") from None
        except TimeoutError:
            raise GatewayError(504, "picker_timeout", "picker pick: no answer in time") from None

    async def _push(self, incoming: Incoming, ask: PickAsk) -> Pushed:
        length = incoming.header_map.get("content-length", "")
        declared = int(length) if length.isdigit() else None
        upload = Upload(incoming.body, self._max_body_bytes, self._body_time_s)
        upload.check_declared(declared)
        whole = await incoming.whole() if incoming.whole is not None else None
        try:
            # A body at hand goes in as a list (no stream to wait on); else as it arrives.
            chunks = upload.chunks() if whole is None else upload.whole(whole)
            stream_id, picked = await self._picker.push_and_pick(
                chunks, declared_length=declared, request_path=incoming.path, ask=ask
            )
        except grpc.aio.AioRpcError as error:
            raise upload.error() if upload.cut else errors.rpc_error(error, "push") from None
        except BodyCut:  # the hosted picker sees the upload's own exception
            raise upload.error() from None
        except asyncio.CancelledError:
            if upload.cut_short():  # our own reset of the stream, not a cancelled request
                raise upload.error() from None
            raise
        return Pushed(stream_id, upload.usage_ask.asked(), picked)

    async def _dispatch(
        self,
        pick: pb.PickResponse,
        extras: PickExtras,
        pushed: Pushed,
        incoming: Incoming,
        reports: Reports,
    ) -> Relay:
        path, query = incoming.path, incoming.query
        if extras.upstream_path:  # a translated local pick: the other API's endpoint
            path, query = extras.upstream_path, ""
        try:
            target = resolve(pick, self._backends, path, query)
        except BackendUnresolved as exc:
            reason = pb.AbortRequest.BACKEND_UNRESOLVED
            raise _aborted(
                reports, reason, f"no backend {exc.ref}", errors.backend_unresolved(exc.ref)
            ) from None
        except CredentialMissing as exc:
            ref = _provider_ref(pick)
            reason = pb.AbortRequest.BACKEND_UNAUTHORIZED
            raise _aborted(
                reports, reason, f"credential: {exc}", errors.backend_unauthorized(ref)
            ) from None
        headers = request_headers(
            incoming.headers, target, length=pick.body_total_bytes, drop=self._own_headers
        )
        sent = incoming.header_map.get("x-request-id")
        if sent != incoming.request_id:  # one id in every log along the way: the gateway's
            if sent is not None:  # the client's, unusable (too long, not printable ASCII)
                headers = [(name, value) for name, value in headers if name != "x-request-id"]
            headers.append(("x-request-id", incoming.request_id))
        clock = TokenClock()
        response = await self._send(incoming.method, target.url, headers, (pick, extras), reports)
        try:
            if target.provider is not None and response.status in _UNAUTHORIZED:
                detail = f"upstream answered {response.status}"
                reason = pb.AbortRequest.BACKEND_UNAUTHORIZED
                raise _aborted(
                    reports, reason, detail, errors.backend_unauthorized(target.provider)
                )
            _log_dispatch(incoming, pick, target, response.status)
            exchange = Exchange(
                path=incoming.path.partition("?")[0],
                request_headers=incoming.header_map,
                pick=pick,
                status=response.status,
                content_type=response.header("content-type").lower(),
                client_asked_usage=pushed.asked_usage,
                extras=extras,
            )
            return Relay(
                response,
                clock,
                reports,
                fallback_model=pick.requested_model,
                transform=self._transforms.for_exchange(exchange),
                on_finish=incoming.on_finish,
                max_whole_bytes=self._max_body_bytes,
            )
        except BaseException:
            response.close()  # not relayed: its engine must not go on generating for nobody
            raise

    async def _send(
        self,
        method: str,
        url: str,
        headers: list[tuple[str, str]],
        picked: Picked,
        reports: Reports,
    ) -> Response:
        pick, extras = picked
        body = self._pulled(pick.response_id, pick.body_total_bytes, extras.body)
        try:
            return await self._http.request(method, url, headers, body)
        except (grpc.aio.AioRpcError, PullMismatch) as exc:
            detail = f"PullBody: {_describe(exc)}"
            error = errors.upstream_failed("the request body could not be read back")
            raise _aborted(reports, pb.AbortRequest.PULL_FAILED, detail, error) from None
        except UpstreamError as exc:
            reason, error = _upstream_failure(exc)
            raise _aborted(reports, reason, f"upstream: {_describe(exc)}", error) from None

    async def _pulled(
        self, response_id: int, expected: int, inline: bytes | None
    ) -> AsyncIterator[bytes | memoryview]:
        """PullBody, or the body the pick carried inline, checked to be exactly
        `body_total_bytes` long (spec: callers may enforce)."""
        if inline is not None:
            if len(inline) != expected:
                raise PullMismatch(f"the pick carried {len(inline)} bytes, announced {expected}")
            yield inline
            return
        total = 0
        async for chunk in self._picker.pull(response_id):
            total += len(chunk)
            yield chunk
        if total != expected:
            raise PullMismatch(f"PullBody sent {total} bytes, the pick announced {expected}")


def _aborted(
    reports: Reports, reason: AbortReason, detail: str, error: GatewayError
) -> GatewayError:
    reports.abort(reason, detail)
    log.warning(
        "abort %s: %s", pb.AbortRequest.Reason.Name(reason), detail
    )  # details name hosts and statuses, never bodies or credentials
    return error


def _upstream_failure(exc: UpstreamError) -> tuple[AbortReason, GatewayError]:
    if isinstance(exc, ConnectFailed):
        return pb.AbortRequest.NOT_DISPATCHED, errors.upstream_failed(
            "the upstream could not be reached"
        )
    if isinstance(exc, ReadTimeout):
        return pb.AbortRequest.REASON_UNSPECIFIED, errors.upstream_timeout(
            "the upstream did not answer in time"
        )
    return pb.AbortRequest.REASON_UNSPECIFIED, errors.upstream_failed("the upstream failed")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name} {exc.details()}"
    return f"{type(exc).__name__} {exc}".strip()


def _provider_ref(pick: pb.PickResponse) -> str:
    ref = pick.provider.backend_ref
    return f"{ref.namespace}/{ref.name}"


def _log_dispatch(incoming: Incoming, pick: pb.PickResponse, target: Target, status: int) -> None:
    if log.isEnabledFor(logging.DEBUG):
        where = target.provider or pick.local.endpoint
        log.debug("request %s -> %s: upstream %d", incoming.request_id, where, status)

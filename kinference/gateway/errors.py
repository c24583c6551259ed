"""Every failure the gateway answers with, as an HTTP status and the error JSON clients parse.

OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, everywhere but on
Anthropic's Messages path (`/v1/messages`), which gets Anthropic's,
`{"type": "error", "error": {"type", "message"}}`. Pick outcomes (told apart by the
picker's typed reason code, `kinference-reason-code`, never by its text), picker gRPC
statuses and the gateway's own failures (backend, upstream) are all mapped here and
nowhere else. Statuses follow OpenAI's: an unknown model is 404 `model_not_found`; no ready
worker 503, and a tenant over its budget 429, both with `Retry-After`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import cast

import grpc

from kinference.api.extensions import PickExtras, error_code
from kinference.errors import ServerBusy
from kinference.gateway.sse import encode_event
from kinference.routing.reasons import Reason
from kinference.v1 import picker_pb2 as pb

# Retry-After (seconds) when the picker gives none: workers come back (readiness, scale-up)
# and shed load drains within seconds; a tenant's budget is a sliding minute, in which
# usage ages out second by second.
RETRY_NO_WORKERS_S = 1
RETRY_OVERLOADED_S = 1
RETRY_OVER_BUDGET_S = 5

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",  # OpenAI's, for an unknown model or URL
    405: "invalid_request_error",
    408: "timeout_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    431: "invalid_request_error",
    499: "client_closed_request",
}


# Anthropic's error types by status (https://docs.anthropic.com/en/api/errors).
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}
_ANTHROPIC_SUFFIX = "/messages"


def anthropic_path(path: str) -> bool:
    """Whether a client path is Anthropic's Messages API (its errors take that shape)."""
    return path.partition("?")[0].rstrip("/").endswith(_ANTHROPIC_SUFFIX)


class GatewayError(Exception):
    """A request the gateway answers with an error; `str()` is the client-facing message."""

    def __init__(
        self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})

    @property
    def type(self) -> str:
        return _TYPES.get(self.status, "server_error")

    def body(self, path: str = "") -> bytes:
        """The error JSON for a request on `path`: Anthropic's shape on /v1/messages."""
        if anthropic_path(path):
            kind = _ANTHROPIC_TYPES.get(self.status, "api_error")
            return json.dumps(
                {"type": "error", "error": {"type": kind, "message": self.message}}
            ).encode()
        error = {"message": self.message, "type": self.type, "param": None, "code": self.code}
        return json.dumps({"error": error}).encode()

    def event(self, path: str = "") -> bytes:
        """The error as one server-sent event, for a stream failing after its head went out:
        Anthropic's `event: error` on /v1/messages, else a `data:` event holding the error
        object (what the OpenAI SDKs raise an APIError on)."""
        return encode_event(self.body(path), "error" if anthropic_path(path) else "")


def outcome_error(pick: pb.PickResponse, extras: PickExtras | None = None) -> GatewayError:
    """The error for a Pick that does not dispatch (or dispatches nowhere usable)."""
    extras = extras or PickExtras()
    reason = pick.reason or pb.PickResponse.Outcome.Name(pick.outcome)
    if pick.outcome == pb.PickResponse.BAD_REQUEST:
        return GatewayError(400, "bad_request", reason)
    if pick.outcome == pb.PickResponse.NO_WORKERS:
        return _no_workers_error(reason, extras)
    if pick.outcome == pb.PickResponse.POLICY_REJECTED:
        return _policy_error(reason, extras)
    return GatewayError(502, "bad_pick", f"the picker answered {reason} without a destination")


def _no_workers_error(reason: str, extras: PickExtras) -> GatewayError:
    if extras.code is Reason.UNKNOWN_MODEL:  # as OpenAI answers it: SDKs do not retry a 404
        return GatewayError(404, "model_not_found", reason)
    if extras.code is Reason.NO_TARGET:  # no target takes this request: a retry cannot help
        return GatewayError(400, "unsupported_request", reason)
    return GatewayError(503, "no_workers", reason, _retry(extras, RETRY_NO_WORKERS_S))


def _policy_error(reason: str, extras: PickExtras) -> GatewayError:
    if extras.code is Reason.TENANT_BUDGET:
        return GatewayError(429, "tenant_over_budget", reason, _retry(extras, RETRY_OVER_BUDGET_S))
    if extras.code is Reason.SHED_SATURATED:
        return GatewayError(503, "overloaded", reason, _retry(extras, RETRY_OVERLOADED_S))
    return GatewayError(403, "policy_rejected", reason)


def _retry(extras: PickExtras, default_s: int) -> dict[str, str]:
    seconds = extras.retry_after_s if extras.retry_after_s is not None else default_s
    return {"retry-after": str(seconds)}


# Picker statuses whose HTTP answer does not depend on the stage or the details.
_RPC_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid_body"),
    grpc.StatusCode.UNAVAILABLE: (503, "picker_unavailable"),
    grpc.StatusCode.CANCELLED: (499, "client_closed_request"),
}


def rpc_error(error: grpc.aio.AioRpcError, stage: str) -> GatewayError:
    """The error for a picker RPC that failed; `stage` is push, pick or pull."""
    code, details = error.code(), error.details() or ""
    message = f"picker {stage}: {details or code.name}"
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        if _error_code(error) == ServerBusy.code:  # every body held together: retry later
            return GatewayError(503, "picker_busy", message)
        return GatewayError(413, "request_too_large", message)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        if stage == "push":  # the client's upload stalled past the picker's idle limit
            return GatewayError(408, "request_timeout", message)
        return GatewayError(504, "picker_timeout", message)
    status, name = _RPC_STATUS.get(code, (502, "picker_error"))
    return GatewayError(status, name, message)


def backend_unresolved(ref: str) -> GatewayError:
    return GatewayError(502, "backend_unresolved", f"backend {ref} is not configured here")


def backend_unauthorized(ref: str) -> GatewayError:
    # The gateway's own credential failed: not the client's fault, so not a 401 to it.
    return GatewayError(502, "backend_unauthorized", f"backend {ref} refused the credential")


def upstream_failed(detail: str) -> GatewayError:
    return GatewayError(502, "upstream_error", detail)


def upstream_timeout(detail: str) -> GatewayError:
    return GatewayError(504, "upstream_timeout", detail)


def _error_code(error: grpc.aio.AioRpcError) -> str:
    # grpc.aio's error holds a grpc.aio.Metadata (its stub says otherwise).
    trailing = cast(grpc.aio.Metadata, error.trailing_metadata())
    return error_code(trailing)

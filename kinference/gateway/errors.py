"""Every failure the gateway answers with, as an HTTP status and OpenAI-style error JSON.

`{"error": {"message": ..., "type": ..., "code": ...}}`, the shape OpenAI SDKs parse. Pick
outcomes, picker gRPC statuses and the gateway's own failures (backend, upstream) are all
mapped here and nowhere else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import grpc

from kinference.v1 import picker_pb2 as pb

# POLICY_REJECTED covers three cases the proto does not tell apart; the picker's reason
# text does (kinference.routing.tenants / budget / router). Anything else is a denial.
_OVER_BUDGET_MARK = "used its budget"
_SHED_MARK = "saturated"

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    499: "client_closed_request",
}


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

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.type, "code": self.code}
        return json.dumps({"error": error}).encode()


def outcome_error(pick: pb.PickResponse) -> GatewayError:
    """The error for a Pick that does not dispatch (or dispatches nowhere usable)."""
    reason = pick.reason or pb.PickResponse.Outcome.Name(pick.outcome)
    if pick.outcome == pb.PickResponse.BAD_REQUEST:
        return GatewayError(400, "bad_request", reason)
    if pick.outcome == pb.PickResponse.NO_WORKERS:
        return GatewayError(503, "no_workers", reason)
    if pick.outcome == pb.PickResponse.POLICY_REJECTED:
        return _policy_error(reason)
    return GatewayError(502, "bad_pick", f"the picker answered {reason} without a destination")


def _policy_error(reason: str) -> GatewayError:
    if _OVER_BUDGET_MARK in reason:
        return GatewayError(429, "tenant_over_budget", reason)
    if _SHED_MARK in reason:
        return GatewayError(503, "overloaded", reason)
    return GatewayError(403, "policy_rejected", reason)


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
        if "server-wide" in details:  # every body held together, not this one: retry later
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

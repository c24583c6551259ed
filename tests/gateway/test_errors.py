"""Every Pick outcome and picker gRPC status has one HTTP status and OpenAI error JSON."""

from __future__ import annotations

import json

import grpc
import pytest

from kinference.gateway.errors import GatewayError, outcome_error, rpc_error
from kinference.v1 import picker_pb2 as pb

R = pb.PickResponse
Code = grpc.StatusCode


@pytest.mark.parametrize(
    ("outcome", "reason", "status", "code"),
    [
        (R.BAD_REQUEST, "not JSON", 400, "bad_request"),
        (R.NO_WORKERS, "no pool or provider serves model 'x'", 503, "no_workers"),
        (R.POLICY_REJECTED, "tenant 'a' may not use model 'x'", 403, "policy_rejected"),
        (R.POLICY_REJECTED, "tenant 'a' matches no tenant rule", 403, "policy_rejected"),
        (
            R.POLICY_REJECTED,
            "tenant 'a' used its budget: 9 of 5 tokens in the last minute",
            429,
            "tenant_over_budget",
        ),
        (
            R.POLICY_REJECTED,
            "pool default/chat is saturated: DEFERRABLE requests are shed first",
            503,
            "overloaded",
        ),
        (R.UNSPECIFIED, "", 502, "bad_pick"),
        (R.OK, "", 502, "bad_pick"),  # OK without a destination is the picker's bug
    ],
)
def test_outcomes(outcome: int, reason: str, status: int, code: str) -> None:
    error = outcome_error(R(outcome=outcome, reason=reason))  # type: ignore[arg-type]
    assert (error.status, error.code) == (status, code)
    assert error.message


class FakeRpcError(grpc.aio.AioRpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


@pytest.mark.parametrize(
    ("code", "details", "stage", "status", "name"),
    [
        (Code.RESOURCE_EXHAUSTED, "body over the limit", "push", 413, "request_too_large"),
        (Code.RESOURCE_EXHAUSTED, "server-wide body budget exhausted", "push", 503, "picker_busy"),
        (Code.INVALID_ARGUMENT, "declared length disagrees", "push", 400, "invalid_body"),
        (Code.DEADLINE_EXCEEDED, "no body bytes for 30 s", "push", 408, "request_timeout"),
        (Code.DEADLINE_EXCEEDED, "", "pick", 504, "picker_timeout"),
        (Code.UNAVAILABLE, "draining", "push", 503, "picker_unavailable"),
        (Code.CANCELLED, "", "push", 499, "client_closed_request"),
        (Code.NOT_FOUND, "expired", "pick", 502, "picker_error"),
        (Code.FAILED_PRECONDITION, "consumed", "pick", 502, "picker_error"),
        (Code.INTERNAL, "boom", "pick", 502, "picker_error"),
    ],
)  # fmt: skip
def test_rpc_statuses(code: Code, details: str, stage: str, status: int, name: str) -> None:
    error = rpc_error(FakeRpcError(code, details), stage)
    assert (error.status, error.code) == (status, name)
    assert error.message.startswith(f"picker {stage}: ")


def test_body_is_openai_error_json() -> None:
    error = GatewayError(429, "tenant_over_budget", "slow down")
    assert json.loads(error.body()) == {
        "error": {"message": "slow down", "type": "rate_limit_error", "code": "tenant_over_budget"}
    }
    assert GatewayError(502, "x", "y").type == "server_error"

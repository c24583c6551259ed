"""Every Pick outcome and picker gRPC status has one HTTP status and OpenAI error JSON."""

from __future__ import annotations

import json

import grpc
import pytest

from kinference.api.extensions import ERROR_CODE, PickExtras
from kinference.gateway.errors import GatewayError, outcome_error, rpc_error
from kinference.routing.reasons import Reason
from kinference.v1 import picker_pb2 as pb

R = pb.PickResponse
Code = grpc.StatusCode


@pytest.mark.parametrize(
    ("outcome", "code", "status", "name", "retry_after"),
    [
        (R.BAD_REQUEST, Reason.MALFORMED, 400, "bad_request", None),
        (R.NO_WORKERS, Reason.UNKNOWN_MODEL, 404, "model_not_found", None),
        (R.NO_WORKERS, Reason.NO_TARGET, 400, "unsupported_request", None),
        (R.NO_WORKERS, Reason.NO_READY_ENDPOINT, 503, "no_workers", "1"),
        (R.NO_WORKERS, Reason.PROVIDER_COOLING, 503, "no_workers", "1"),
        (R.NO_WORKERS, Reason.UNKNOWN_POOL, 503, "no_workers", "1"),
        (R.NO_WORKERS, Reason.NONE, 503, "no_workers", "1"),  # a picker without codes
        (R.POLICY_REJECTED, Reason.TENANT_RULE, 403, "policy_rejected", None),
        (R.POLICY_REJECTED, Reason.TENANT_BUDGET, 429, "tenant_over_budget", "5"),
        (R.POLICY_REJECTED, Reason.SHED_SATURATED, 503, "overloaded", "1"),
        (R.POLICY_REJECTED, Reason.NONE, 403, "policy_rejected", None),
        (R.UNSPECIFIED, Reason.NONE, 502, "bad_pick", None),
        (R.OK, Reason.NONE, 502, "bad_pick", None),  # OK without a destination: a picker bug
    ],
)
def test_outcomes(
    outcome: int, code: Reason, status: int, name: str, retry_after: str | None
) -> None:
    pick = R(outcome=outcome, reason="why")  # type: ignore[arg-type]
    error = outcome_error(pick, PickExtras(code=code))
    assert (error.status, error.code) == (status, name)
    assert "why" in error.message
    assert error.headers.get("retry-after") == retry_after


def test_the_reason_text_is_never_parsed() -> None:
    text = "tenant 'a' used its budget: 9 of 5 tokens in the last minute"
    error = outcome_error(R(outcome=R.POLICY_REJECTED, reason=text))
    assert (error.status, error.code) == (403, "policy_rejected")


def test_retry_after_from_the_picker_wins() -> None:
    pick = R(outcome=R.NO_WORKERS, reason="cooling")
    error = outcome_error(pick, PickExtras(code=Reason.PROVIDER_COOLING, retry_after_s=17))
    assert error.headers == {"retry-after": "17"}


class FakeRpcError(grpc.aio.AioRpcError):
    def __init__(self, code: grpc.StatusCode, details: str, error_code: str = "") -> None:
        trailing = grpc.aio.Metadata(*([(ERROR_CODE, error_code)] if error_code else []))
        super().__init__(code, grpc.aio.Metadata(), trailing, details)


@pytest.mark.parametrize(
    ("code", "details", "stage", "status", "name"),
    [
        (Code.RESOURCE_EXHAUSTED, "body over the limit", "push", 413, "request_too_large"),
        # Told by the error code, not the text: a body over its limit may mention anything.
        (Code.RESOURCE_EXHAUSTED, "server-wide body budget exhausted", "push", 413,
         "request_too_large"),
        (Code.RESOURCE_EXHAUSTED, "server_busy", "push", 503, "picker_busy"),
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
    error_code = "server_busy" if details == "server_busy" else ""
    error = rpc_error(FakeRpcError(code, details, error_code), stage)
    assert (error.status, error.code) == (status, name)
    assert error.message.startswith(f"picker {stage}: ")


def test_body_is_openai_error_json() -> None:
    error = GatewayError(429, "tenant_over_budget", "slow down")
    assert json.loads(error.body("/v1/chat/completions")) == {
        "error": {
            "message": "slow down",
            "type": "rate_limit_error",
            "param": None,
            "code": "tenant_over_budget",
        }
    }
    assert GatewayError(502, "x", "y").type == "server_error"


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (502, "api_error"),
        (503, "overloaded_error"),
    ],
)
def test_body_on_the_messages_path_is_anthropic_error_json(status: int, kind: str) -> None:
    for path in ("/v1/messages", "/v1/messages?beta=true", "/anthropic/v1/messages/"):
        assert json.loads(GatewayError(status, "x", "said").body(path)) == {
            "type": "error",
            "error": {"type": kind, "message": "said"},
        }

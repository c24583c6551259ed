"""Protobuf <-> domain conversion: PushBody metadata, Pick calls and responses, reports."""

from __future__ import annotations

import pytest

from kinference.api import convert
from kinference.errors import InvalidArgument
from kinference.routing import LocalChoice, Outcome, ProviderChoice, QoS
from kinference.service import PickResult
from kinference.v1 import picker_pb2 as pb

DL = convert.DECLARED_LENGTH
RID = convert.CLIENT_REQUEST_ID


def test_header_names_match_the_spec() -> None:
    assert DL == "kinference-declared-length"
    assert RID == "kinference-client-request-id"


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        (None, (None, "")),
        ([], (None, "")),
        ([(DL, "0")], (0, "")),
        ([(DL, "1234")], (1234, "")),
        ([(DL, " 17 ")], (17, "")),
        ([(DL, "007")], (7, "")),
        ([(DL, b"99")], (99, "")),
        ([(DL, str(1 << 70))], (1 << 70, "")),
        ([(DL, "5"), (DL, "5")], (5, "")),  # repeated with the same value
        ([(RID, "req-1"), (DL, "3"), ("user-agent", "x")], (3, "req-1")),
        ([(RID, b"bytes-id")], (None, "bytes-id")),
        ([(RID, "r" * 1000)], (None, "r" * 256)),  # only logged: cut, not refused
        ([("Kinference-Declared-Length", "x")], (None, "")),  # gRPC keys are lower case
    ],
)
def test_push_metadata(metadata: convert.Metadata | None, expected: tuple[int | None, str]) -> None:
    assert convert.push_metadata(metadata) == expected


@pytest.mark.parametrize(
    "values",
    [
        ["abc"],
        [""],
        ["-1"],
        ["+5"],
        ["1.0"],
        ["1e3"],
        ["0x10"],
        ["1 2"],
        ["\u0663"],  # ARABIC-INDIC DIGIT THREE: a digit to str.isdigit, not a byte count
        ["\u00b2"],  # SUPERSCRIPT TWO
        ["5", "6"],  # repeated with different values
        ["5", "x"],
    ],
)
def test_bad_declared_length(values: list[str]) -> None:
    with pytest.raises(InvalidArgument, match=DL):
        convert.push_metadata([(DL, value) for value in values])


def test_bad_declared_length_message_is_short() -> None:
    with pytest.raises(InvalidArgument) as caught:
        convert.push_metadata([(DL, "z" * 10_000)])
    assert len(str(caught.value)) < 120


def test_pick_call_defaults() -> None:
    call = convert.pick_call(pb.PickRequest(body_stream_id=9))
    assert call.stream_id == 9
    assert call.pool is None
    assert call.qos is QoS.INTERACTIVE
    assert call.tenant == ""
    assert call.client_request_id == ""


@pytest.mark.parametrize(
    ("qos", "expected"),
    [
        (pb.PickRequest.INTERACTIVE, QoS.INTERACTIVE),
        (pb.PickRequest.BATCH, QoS.BATCH),
        (pb.PickRequest.DEFERRABLE, QoS.DEFERRABLE),
    ],
)
def test_pick_call_qos(qos: pb.PickRequest.QosClass.ValueType, expected: QoS) -> None:
    assert convert.pick_call(pb.PickRequest(body_stream_id=1, qos_class=qos)).qos is expected


def test_pick_call_unknown_qos_is_invalid() -> None:
    request = pb.PickRequest(body_stream_id=1)
    request.qos_class = 7  # type: ignore[assignment]  # an open enum carries values this build does not know
    with pytest.raises(InvalidArgument, match="qos_class 7"):
        convert.pick_call(request)


@pytest.mark.parametrize(
    ("pool", "expected"),
    [
        (pb.InferencePoolRef(namespace="team-b", name="big"), "team-b/big"),
        (pb.InferencePoolRef(name="chat"), "default/chat"),
        (pb.InferencePoolRef(namespace="ns", name="p", resource_version="42"), "ns/p"),
        (pb.InferencePoolRef(), None),  # present but empty: no pool named
        (pb.InferencePoolRef(namespace="team-b"), None),
    ],
)
def test_pick_call_pool(pool: pb.InferencePoolRef, expected: str | None) -> None:
    call = convert.pick_call(pb.PickRequest(body_stream_id=1, inference_pool=pool))
    assert call.pool == expected


def test_pick_call_tenant_and_request_id() -> None:
    call = convert.pick_call(
        pb.PickRequest(body_stream_id=1, tenant="acme", client_request_id="x" * 300)
    )
    assert call.tenant == "acme"
    assert call.client_request_id == "x" * 256


def test_pick_response_ok() -> None:
    result = PickResult(
        Outcome.OK,
        response_id=77,
        destination=LocalChoice("10.0.0.5:8000", 3, "default/chat", "llama", 2, 5),
        body_total_bytes=1234,
        requested_model="llama",
    )
    response = convert.pick_response(result)
    assert response.outcome == pb.PickResponse.OK
    assert response.WhichOneof("destination") == "local"
    assert response.local.endpoint == "10.0.0.5:8000"
    assert response.response_id == 77
    assert response.body_total_bytes == 1234
    assert response.requested_model == "llama"
    assert response.reason == ""


def test_pick_response_degraded_keeps_destination_and_reason() -> None:
    result = PickResult(
        Outcome.DEGRADED,
        response_id=5,
        destination=LocalChoice("10.0.0.6:8000", 1, "default/chat", "llama"),
        reason="no full prefix-cache signal: x",
        body_total_bytes=10,
        requested_model="llama",
    )
    response = convert.pick_response(result)
    assert response.outcome == pb.PickResponse.DEGRADED
    assert response.local.endpoint == "10.0.0.6:8000"
    assert response.reason == "no full prefix-cache signal: x"


@pytest.mark.parametrize(
    ("ref", "path", "namespace", "name"),
    [
        ("ai/openai", "/v1/chat/completions", "ai", "openai"),
        (
            "default/azure.east",
            "/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21",
            "default",
            "azure.east",
        ),
    ],
)
def test_pick_response_provider(ref: str, path: str, namespace: str, name: str) -> None:
    result = PickResult(
        Outcome.OK,
        response_id=9,
        destination=ProviderChoice(ref, path, "gpt-4o"),
        body_total_bytes=99,
        requested_model="llama",
    )
    response = convert.pick_response(result)
    assert response.WhichOneof("destination") == "provider"
    assert response.provider.backend_ref.namespace == namespace
    assert response.provider.backend_ref.name == name
    assert response.provider.path == path
    assert response.response_id == 9
    assert response.body_total_bytes == 99
    assert response.requested_model == "llama"  # what the client asked for, not the served


@pytest.mark.parametrize(
    ("outcome", "wire"),
    [
        (Outcome.NO_WORKERS, pb.PickResponse.NO_WORKERS),
        (Outcome.BAD_REQUEST, pb.PickResponse.BAD_REQUEST),
        (Outcome.DEGRADED, pb.PickResponse.DEGRADED),
        (Outcome.POLICY_REJECTED, pb.PickResponse.POLICY_REJECTED),
    ],
)
def test_pick_response_without_destination(outcome: Outcome, wire: int) -> None:
    response = convert.pick_response(PickResult(outcome, reason="why", requested_model="m"))
    assert response.outcome == wire
    assert response.WhichOneof("destination") is None
    assert response.response_id == 0
    assert response.reason == "why"
    assert response.requested_model == "m"


def test_every_outcome_has_a_wire_value() -> None:
    for outcome in Outcome:
        assert convert.pick_response(PickResult(outcome)).outcome != pb.PickResponse.UNSPECIFIED


def test_final_report() -> None:
    report = convert.final_report(
        pb.ReportFinalTokenRequest(
            response_id=5,
            model="llama",
            prompt_tokens=10,
            completion_tokens=3,
            cached_tokens=0,
            itl_bucket_counts=[1, 2],
            itl_bucket_layout=1,
        )
    )
    assert report.response_id == 5
    assert report.model == "llama"
    assert (report.prompt_tokens, report.completion_tokens) == (10, 3)
    assert report.cached_tokens == 0  # present, even though zero
    assert report.itl_bucket_counts == (1, 2)
    assert report.itl_bucket_layout == 1
    absent = convert.final_report(pb.ReportFinalTokenRequest(response_id=5))
    assert absent.cached_tokens is None
    assert absent.itl_bucket_counts == ()


@pytest.mark.parametrize(
    ("reason", "name"),
    [
        (pb.AbortRequest.REASON_UNSPECIFIED, "REASON_UNSPECIFIED"),
        (pb.AbortRequest.NOT_DISPATCHED, "NOT_DISPATCHED"),
        (pb.AbortRequest.PULL_FAILED, "PULL_FAILED"),
        (pb.AbortRequest.BACKEND_UNRESOLVED, "BACKEND_UNRESOLVED"),
        (pb.AbortRequest.BACKEND_UNAUTHORIZED, "BACKEND_UNAUTHORIZED"),
    ],
)
def test_abort_reason(reason: pb.AbortRequest.Reason.ValueType, name: str) -> None:
    assert convert.abort_reason(pb.AbortRequest(reason=reason)) == name


def test_unknown_abort_reason() -> None:
    request = pb.AbortRequest()
    request.reason = 42  # type: ignore[assignment]
    assert convert.abort_reason(request) == "REASON_42"


def test_a_pick_response_carries_a_lone_surrogate_as_a_replacement_character() -> None:
    """A request's model may hold one (JSON's `"\\ud800"`); protobuf strings are UTF-8."""
    result = PickResult(
        Outcome.NO_WORKERS,
        reason="no pool serves model 'a\ud800b'",
        requested_model="a\ud800b",
    )
    response = convert.pick_response(result)
    assert response.requested_model == "a\ufffdb"
    assert response.reason == "no pool serves model 'a\ufffdb'"

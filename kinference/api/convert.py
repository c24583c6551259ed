"""Protobuf messages to domain values and back; nothing else in the API layer builds them."""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.message import DecodeError

from kinference.api.extensions import PickExtras
from kinference.config.fields import MAX_MODEL_CHARS
from kinference.config.tenants import MAX_TENANT_BYTES
from kinference.errors import InvalidArgument
from kinference.routing import LocalChoice, Outcome, ProviderChoice, QoS
from kinference.routing.reasons import Reason
from kinference.service import FinalReport, PickCall, PickResult
from kinference.v1 import picker_pb2 as pb

DECLARED_LENGTH = "kinference-declared-length"
CLIENT_REQUEST_ID = "kinference-client-request-id"
MAX_REQUEST_ID_CHARS = 256  # only logged; a longer one is cut, not rejected
# A PickResponse echoes the body's model, and its reason may name it: both are cut, so that
# an answer naming a model no pool serves stays small wherever it travels (picked on push,
# in trailing metadata: gRPC's default limit for those is 8 KiB, 16 KiB at most). A model
# cut is still longer than any a policy may name, so it is never taken for one.
MAX_REASON_CHARS = 1024
MAX_ECHOED_MODEL_CHARS = MAX_MODEL_CHARS + 1

_OUTCOMES = {
    Outcome.OK: pb.PickResponse.OK,
    Outcome.NO_WORKERS: pb.PickResponse.NO_WORKERS,
    Outcome.DEGRADED: pb.PickResponse.DEGRADED,
    Outcome.BAD_REQUEST: pb.PickResponse.BAD_REQUEST,
    Outcome.POLICY_REJECTED: pb.PickResponse.POLICY_REJECTED,
}
_QOS = {
    pb.PickRequest.INTERACTIVE: QoS.INTERACTIVE,
    pb.PickRequest.BATCH: QoS.BATCH,
    pb.PickRequest.DEFERRABLE: QoS.DEFERRABLE,
}
_ABORT_REASONS = {value: name for name, value in pb.AbortRequest.Reason.items()}

Metadata = Iterable[tuple[str, str | bytes]]


def push_metadata(metadata: Metadata | None) -> tuple[int | None, str]:
    """(declared length or None, client request id) from PushBody's call metadata."""
    declared: int | None = None
    request_id = ""
    for key, value in metadata or ():
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        if key == DECLARED_LENGTH:
            declared = _declared_length(text, declared)
        elif key == CLIENT_REQUEST_ID:
            request_id = request_id_of(text)
    return declared, request_id


def request_id_of(text: str) -> str:
    """A client request id as kept (logged only): cut to `MAX_REQUEST_ID_CHARS`."""
    return text[:MAX_REQUEST_ID_CHARS]


def _declared_length(text: str, earlier: int | None) -> int:
    stripped = text.strip()
    if not stripped.isdigit() or not stripped.isascii():
        raise InvalidArgument(f"{DECLARED_LENGTH} must be a byte count, got {text[:40]!r}")
    value = int(stripped)
    if earlier is not None and earlier != value:
        raise InvalidArgument(f"{DECLARED_LENGTH} given twice with different values")
    return value


def check_tenant(tenant: str) -> None:
    """A tenant becomes Redis keys and metric labels: a longer one than any real name is
    refused (the body stays, waiting for a valid Pick)."""
    size = len(tenant.encode())
    if size > MAX_TENANT_BYTES:
        raise InvalidArgument(
            f"tenant is {size} bytes long; at most {MAX_TENANT_BYTES} bytes are accepted"
        )


def pick_call(request: pb.PickRequest) -> PickCall:
    pool = None
    if request.HasField("inference_pool"):
        pool = (request.inference_pool.namespace, request.inference_pool.name)
    return pick_call_of(
        request.body_stream_id,
        qos_class=request.qos_class,
        tenant=request.tenant,
        pool=pool,
        client_request_id=request.client_request_id,
    )


def pick_on_push(serialized: bytes) -> PickCall:
    """The PickCall of a `kinference-pick-bin` PushBody (its stream id set at the commit)."""
    try:
        request = pb.PickRequest.FromString(serialized)
    except (DecodeError, ValueError, RecursionError):
        raise InvalidArgument("kinference-pick-bin is not a PickRequest") from None
    request.body_stream_id = 0
    return pick_call(request)


def pick_call_of(
    stream_id: int,
    *,
    qos_class: pb.PickRequest.QosClass.ValueType,
    tenant: str,
    pool: tuple[str, str] | None,
    client_request_id: str,
) -> PickCall:
    """A PickRequest's fields as a `PickCall` (the in-process gateway's Pick builds no
    message); `pool` is (namespace, name), ignored without a name."""
    qos = _QOS.get(qos_class)
    if qos is None:
        raise InvalidArgument(f"unknown qos_class {qos_class}")
    check_tenant(tenant)
    named = None
    if pool is not None and pool[1]:
        named = f"{pool[0] or 'default'}/{pool[1]}"
    return PickCall(
        stream_id=stream_id,
        pool=named,
        qos=qos,
        tenant=tenant,
        client_request_id=request_id_of(client_request_id),
    )


def pick_response(result: PickResult) -> pb.PickResponse:
    reason, model = result.reason, result.requested_model
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[:MAX_REASON_CHARS]
    if len(model) > MAX_ECHOED_MODEL_CHARS:
        model = model[:MAX_ECHOED_MODEL_CHARS]
    try:
        response = _response(result, reason, model)
    except UnicodeEncodeError:  # the request's model holds a lone surrogate (JSON's "\ud800")
        response = _response(result, _utf8(reason), _utf8(model))
    destination = result.destination
    if isinstance(destination, LocalChoice):
        response.local.endpoint = destination.endpoint
    elif isinstance(destination, ProviderChoice):
        namespace, _, name = destination.ref.partition("/")
        response.provider.backend_ref.namespace = namespace
        response.provider.backend_ref.name = name
        response.provider.path = destination.path
    return response


def _response(result: PickResult, reason: str, requested_model: str) -> pb.PickResponse:
    return pb.PickResponse(
        outcome=_OUTCOMES[result.outcome],
        response_id=result.response_id,
        reason=reason,
        body_total_bytes=result.body_total_bytes,
        requested_model=requested_model,
    )


def _utf8(text: str) -> str:
    """`text` as a protobuf string can carry it: each lone surrogate as U+FFFD."""
    return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)


def pick_extras(result: PickResult) -> PickExtras | None:
    """The extensions a Pick's metadata carries; None when there are none (the usual OK)."""
    if result.code is Reason.NONE and result.translated is None:
        return None
    return PickExtras(
        result.code,
        result.retry_after_s,
        result.translated,
        result.local_path,
        result.usage_asked,
    )


def final_report(request: pb.ReportFinalTokenRequest) -> FinalReport:
    return FinalReport(
        response_id=request.response_id,
        model=request.model,
        prompt_tokens=request.prompt_tokens,
        completion_tokens=request.completion_tokens,
        cached_tokens=request.cached_tokens if request.HasField("cached_tokens") else None,
        itl_bucket_counts=tuple(request.itl_bucket_counts),
        itl_bucket_layout=request.itl_bucket_layout,
    )


def abort_reason(request: pb.AbortRequest) -> str:
    return _ABORT_REASONS.get(request.reason, f"REASON_{request.reason}")

"""The grpc.aio server: Picker with raw body framing, PickerSession (kinference's own
extension), health and reflection."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from kinference.api.framing import decode_chunk, encode_chunk
from kinference.api.servicer import PickerServicer
from kinference.api.session import SessionServicer
from kinference.api.status import MalformedMessage
from kinference.bodies import MAX_CHUNK_BYTES
from kinference.v1 import picker_pb2 as pb
from kinference.v1 import session_pb2 as spb

SERVICE_NAME = "kinference.v1.Picker"
SESSION_SERVICE_NAME = "kinference.v1.PickerSession"

# Room for a BodyChunk's tag and length prefix, and for a non-canonical encoding of it, on
# top of the 1 MiB payload limit; anything larger is refused by gRPC before it is buffered.
_FRAMING_SLACK = 64

SERVER_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", MAX_CHUNK_BYTES + _FRAMING_SLACK),
    # Callers hold one long-lived channel; let them keep it alive with pings.
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    # Two instances must never share a port silently.
    ("grpc.so_reuseport", 0),
]


def _lenient(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """A deserializer that never raises: gRPC would answer UNKNOWN and log a traceback per
    malformed request, which a hostile caller could repeat at will."""

    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except (DecodeError, ValueError, RecursionError) as exc:
            return MalformedMessage(str(exc)[:200])

    return deserialize


def picker_handlers(servicer: PickerServicer) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    """Method handlers for kinference.v1.Picker; body chunks skip the protobuf runtime. A
    request that does not decode reaches its handler as a `MalformedMessage`, which
    `grpc_errors` answers INVALID_ARGUMENT."""

    def unary(method: str, message: Any, response: Any) -> grpc.RpcMethodHandler[Any, Any]:
        return grpc.unary_unary_rpc_method_handler(
            getattr(servicer, method),
            request_deserializer=_lenient(message.FromString),
            response_serializer=response.SerializeToString,
        )

    handlers = {
        "PushBody": grpc.stream_unary_rpc_method_handler(
            servicer.PushBody,
            request_deserializer=decode_chunk,
            response_serializer=pb.PushBodyResponse.SerializeToString,
        ),
        "Pick": unary("Pick", pb.PickRequest, pb.PickResponse),
        "PullBody": grpc.unary_stream_rpc_method_handler(
            servicer.PullBody,
            request_deserializer=_lenient(pb.PullBodyRequest.FromString),
            response_serializer=encode_chunk,
        ),
        "ReportFirstToken": unary(
            "ReportFirstToken", pb.ReportFirstTokenRequest, pb.ReportFirstTokenResponse
        ),
        "ReportFinalToken": unary(
            "ReportFinalToken", pb.ReportFinalTokenRequest, pb.ReportFinalTokenResponse
        ),
        "Abort": unary("Abort", pb.AbortRequest, pb.AbortResponse),
    }
    return handlers


def session_handlers(servicer: SessionServicer) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    """The method handler of kinference.v1.PickerSession (a malformed batch decodes to a
    `MalformedMessage`, which ends the stream with INVALID_ARGUMENT)."""
    return {
        "Session": grpc.stream_stream_rpc_method_handler(
            servicer.Session,
            request_deserializer=_lenient(spb.ClientBatch.FromString),
            response_serializer=spb.ServerBatch.SerializeToString,
        )
    }


def build_server(
    servicer: PickerServicer,
    health_servicer: HealthServicer,
    *,
    max_concurrent_streams: int = 0,
    session: SessionServicer | None = None,
) -> grpc.aio.Server:
    """A server with the Picker, grpc.health.v1 and reflection; responses are never
    compressed, so callers that accept only `identity` are always served; with `session`,
    kinference.v1.PickerSession too.
    `max_concurrent_streams` caps the RPCs open at once on one connection (0: gRPC's
    default, no cap); further calls wait in the client until one ends."""
    options = list(SERVER_OPTIONS)
    if max_concurrent_streams:
        options.append(("grpc.max_concurrent_streams", max_concurrent_streams))
    server = grpc.aio.server(options=options)
    handlers = picker_handlers(servicer)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    # Registered methods are matched by the gRPC core itself, sparing every call the
    # generic-handler lookup in Python (as generated servicers do).
    server.add_registered_method_handlers(SERVICE_NAME, handlers)  # type: ignore[attr-defined]
    names = [SERVICE_NAME]
    if session is not None:
        streams = session_handlers(session)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SESSION_SERVICE_NAME, streams),)
        )
        server.add_registered_method_handlers(SESSION_SERVICE_NAME, streams)  # type: ignore[attr-defined]
        names.append(SESSION_SERVICE_NAME)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (
            *names,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ),
        server,
    )
    return server

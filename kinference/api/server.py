"""The grpc.aio server: Picker with raw body framing, health and reflection."""

from __future__ import annotations

from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from kinference.api.framing import decode_chunk, encode_chunk
from kinference.api.servicer import PickerServicer
from kinference.bodies import MAX_CHUNK_BYTES
from kinference.v1 import picker_pb2 as pb

SERVICE_NAME = "kinference.v1.Picker"

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


def picker_handlers(servicer: PickerServicer) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    """Method handlers for kinference.v1.Picker; body chunks skip the protobuf runtime."""
    unary = grpc.unary_unary_rpc_method_handler
    handlers = {
        "PushBody": grpc.stream_unary_rpc_method_handler(
            servicer.PushBody,
            request_deserializer=decode_chunk,
            response_serializer=pb.PushBodyResponse.SerializeToString,
        ),
        "Pick": unary(
            servicer.Pick,
            request_deserializer=pb.PickRequest.FromString,
            response_serializer=pb.PickResponse.SerializeToString,
        ),
        "PullBody": grpc.unary_stream_rpc_method_handler(
            servicer.PullBody,
            request_deserializer=pb.PullBodyRequest.FromString,
            response_serializer=encode_chunk,
        ),
        "ReportFirstToken": unary(
            servicer.ReportFirstToken,
            request_deserializer=pb.ReportFirstTokenRequest.FromString,
            response_serializer=pb.ReportFirstTokenResponse.SerializeToString,
        ),
        "ReportFinalToken": unary(
            servicer.ReportFinalToken,
            request_deserializer=pb.ReportFinalTokenRequest.FromString,
            response_serializer=pb.ReportFinalTokenResponse.SerializeToString,
        ),
        "Abort": unary(
            servicer.Abort,
            request_deserializer=pb.AbortRequest.FromString,
            response_serializer=pb.AbortResponse.SerializeToString,
        ),
    }
    return handlers


def build_server(servicer: PickerServicer, health_servicer: HealthServicer) -> grpc.aio.Server:
    """A server with the Picker, grpc.health.v1 and reflection; responses are never
    compressed, so callers that accept only `identity` are always served."""
    server = grpc.aio.server(options=SERVER_OPTIONS)
    handlers = picker_handlers(servicer)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    # Registered methods are matched by the gRPC core itself, sparing every call the
    # generic-handler lookup in Python (as generated servicers do).
    server.add_registered_method_handlers(SERVICE_NAME, handlers)  # type: ignore[attr-defined]
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (
            SERVICE_NAME,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ),
        server,
    )
    return server

"""No-logic server of the Picker contract: the ceiling the gRPC stack itself allows.

It buffers and replays bodies without parsing, validating or routing anything, so the
benchmark can report kinference's figures as a ratio against what plain grpc.aio on
uvloop achieves on the same machine in the same run.

    python -m loadtest.baseline_server --listen 127.0.0.1:50051
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import signal
from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import grpc
import uvloop
from grpc_health.v1 import health, health_pb2_grpc

from kinference.v1 import picker_pb2, picker_pb2_grpc

MAX_CHUNK_BYTES = 1 << 20
# A 1 MiB chunk plus its protobuf framing (tag + varint length) and some slack.
MAX_MESSAGE_BYTES = MAX_CHUNK_BYTES + 4096
SERVER_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.so_reuseport", 0),
]
GRACE_SECONDS = 2.0
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


class BaselinePicker(picker_pb2_grpc.PickerServicer):
    """Stores pushed chunks, hands them back on pull; every decision is a constant."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._pushed: dict[int, list[bytes]] = {}
        self._picked: dict[int, list[bytes]] = {}

    async def PushBody(
        self,
        request_iterator: AsyncIterator[picker_pb2.BodyChunk],
        context: Context,
    ) -> picker_pb2.PushBodyResponse:
        chunks: list[bytes] = []
        total = 0
        async for message in request_iterator:
            chunks.append(message.chunk)
            total += len(message.chunk)
        stream_id = next(self._ids)
        self._pushed[stream_id] = chunks
        return picker_pb2.PushBodyResponse(stream_id=stream_id, total_bytes=total)

    async def Pick(
        self, request: picker_pb2.PickRequest, context: Context
    ) -> picker_pb2.PickResponse:
        chunks = self._pushed.pop(request.body_stream_id, None)
        if chunks is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "unknown body_stream_id")
        response_id = next(self._ids)
        self._picked[response_id] = chunks
        return picker_pb2.PickResponse(
            outcome=picker_pb2.PickResponse.OK,
            local=picker_pb2.LocalTarget(endpoint="127.0.0.1:8000"),
            response_id=response_id,
            body_total_bytes=sum(len(chunk) for chunk in chunks),
            requested_model="x",
        )

    # Writes through the context (the cheapest aio streaming path), not an async generator.
    async def PullBody(  # type: ignore[override]
        self, request: picker_pb2.PullBodyRequest, context: Context
    ) -> None:
        chunks = self._picked.pop(request.response_id, None)
        if chunks is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "unknown response_id")
        for chunk in chunks:
            await context.write(picker_pb2.BodyChunk(chunk=chunk))

    async def ReportFirstToken(
        self,
        request: picker_pb2.ReportFirstTokenRequest,
        context: Context,
    ) -> picker_pb2.ReportFirstTokenResponse:
        return picker_pb2.ReportFirstTokenResponse(acknowledged=True)

    async def ReportFinalToken(
        self,
        request: picker_pb2.ReportFinalTokenRequest,
        context: Context,
    ) -> picker_pb2.ReportFinalTokenResponse:
        return picker_pb2.ReportFinalTokenResponse(acknowledged=True)

    async def Abort(
        self, request: picker_pb2.AbortRequest, context: Context
    ) -> picker_pb2.AbortResponse:
        self._picked.pop(request.response_id, None)
        return picker_pb2.AbortResponse(released=True)


async def serve(listen: str) -> None:
    """Serve until SIGTERM or SIGINT, then drain for a short grace period."""
    server = grpc.aio.server(options=SERVER_OPTIONS)
    picker_pb2_grpc.add_PickerServicer_to_server(BaselinePicker(), server)
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)  # type: ignore[attr-defined]
    if server.add_insecure_port(listen) == 0:
        raise SystemExit(f"cannot listen on {listen}")
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    waiter = asyncio.create_task(server.wait_for_termination())
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    await server.stop(GRACE_SECONDS)
    for task in (waiter, stopper):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:50051", help="host:port to bind")
    args = parser.parse_args(argv)
    uvloop.run(serve(args.listen))


if __name__ == "__main__":
    main()

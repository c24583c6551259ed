"""Operations over a real channel: health, reflection, compression, graceful shutdown."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from kinference.client import PickerClient
from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import (
    SETTLE_S,
    Code,
    MiB,
    assert_code,
    bodies_held,
    chunked,
    push,
    push_error,
    push_metadata,
    sized_chat_body,
    wait_nothing_held,
    wait_until,
)
from tests.api.test_idle import dense_body, worker_stopped
from tests.conftest import PickerFactory, RunningPicker

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def health_status(channel: grpc.aio.Channel, service: str = "") -> Any:
    stub = health_pb2_grpc.HealthStub(channel)
    response = await stub.Check(health_pb2.HealthCheckRequest(service=service))
    return response.status


async def test_health_is_serving_after_start(picker: RunningPicker) -> None:
    assert await health_status(picker.client.channel) == SERVING
    assert await health_status(picker.client.channel, "kinference.v1.Picker") == SERVING


async def reflect(channel: grpc.aio.Channel, **request: Any) -> Any:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    responses = [
        response
        async for response in stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(**request)])
        )
    ]
    assert len(responses) == 1
    return responses[0]


async def test_reflection_lists_and_describes_the_picker(picker: RunningPicker) -> None:
    listed = await reflect(picker.client.channel, list_services="")
    names = {service.name for service in listed.list_services_response.service}
    assert {"kinference.v1.Picker", "grpc.health.v1.Health"} <= names

    described = await reflect(picker.client.channel, file_containing_symbol="kinference.v1.Picker")
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in described.file_descriptor_response.file_descriptor_proto
    ]
    (picker_file,) = [f for f in files if f.package == "kinference.v1"]
    (service,) = picker_file.service
    methods = {m.name: (m.client_streaming, m.server_streaming) for m in service.method}
    assert methods == {
        "PushBody": (True, False),
        "Pick": (False, False),
        "PullBody": (False, True),
        "ReportFirstToken": (False, False),
        "ReportFinalToken": (False, False),
        "Abort": (False, False),
    }


# --- compression --------------------------------------------------------------------------


async def run_flow(client: PickerClient, body: bytes) -> None:
    pushed = await client.push(chunked(body, MiB), declared_length=len(body))
    assert pushed.total_bytes == len(body)
    pick = await client.pick(pushed.stream_id)
    assert pick.outcome == pb.PickResponse.OK
    pulled = await client.pull_all(pick.response_id)
    assert len(pulled) == pick.body_total_bytes
    assert pulled == body
    assert (await client.first_token(pick.response_id, 10)).acknowledged
    assert (await client.final_token(pick.response_id, itl_bucket_counts=[0] * 15)).acknowledged


async def test_identity_only_client_runs_the_whole_flow(picker: RunningPicker) -> None:
    """A caller that accepts only `identity` gets uncompressed responses it can read.

    The body is highly compressible, so a server compressing PullBody regardless of
    grpc-accept-encoding would make this client fail to decode the messages.
    """
    identity_only = PickerClient(
        picker.target, options=[("grpc.compression_enabled_algorithms_bitset", 1)]
    )
    try:
        await run_flow(identity_only, sized_chat_body(3 * MiB))
        assert await health_status(identity_only.channel) == SERVING
    finally:
        await identity_only.close()
    await wait_nothing_held(picker)


async def test_gzip_compressing_client_runs_the_whole_flow(picker: RunningPicker) -> None:
    channel = grpc.aio.insecure_channel(picker.target, compression=grpc.Compression.Gzip)
    gzip_client = PickerClient(picker.target, channel=channel)
    try:
        # Full 1 MiB chunks: the chunk limit applies to the decompressed payload.
        await run_flow(gzip_client, sized_chat_body(3 * MiB))
    finally:
        await gzip_client.close()
    await wait_nothing_held(picker)


# --- graceful shutdown --------------------------------------------------------------------


async def test_drain_refuses_new_bodies_and_lets_pulls_finish(
    start_picker: PickerFactory,
) -> None:
    grace_s = 20.0
    picker = await start_picker(shutdown_grace_s=grace_s)
    client = picker.client
    body = sized_chat_body(16 * MiB)
    pushed = await push(picker, body, chunk_size=MiB)
    pick = await client.pick(pushed.stream_id)
    assert pick.outcome == pb.PickResponse.OK
    waiting = sized_chat_body(100 * 1024, tag="pushed before the drain")
    waiting_pushed = await push(picker, waiting)

    pull = client.stub.PullBody(pb.PullBodyRequest(response_id=pick.response_id))
    received = [(await pull.read()).chunk]

    started = time.monotonic()
    drain = asyncio.create_task(picker.app.drain_and_stop())
    try:
        # Health checks are told to send new callers elsewhere...
        statuses: list[Any] = []

        async def not_serving() -> bool:
            statuses.append(await health_status(client.channel))
            return statuses[-1] == NOT_SERVING

        deadline = time.monotonic() + SETTLE_S
        while not await not_serving():
            assert time.monotonic() < deadline, f"health never left SERVING: {statuses}"
            await asyncio.sleep(0.01)
        # ... and a new body is refused, from its metadata alone.
        refused = await push_error(picker, [], push_metadata(len(waiting)))
        assert_code(refused, Code.UNAVAILABLE)
        assert not drain.done(), "the drain did not wait for the pull in progress"

        # A body pushed before the drain may still be picked and pulled.
        late = await client.pick(waiting_pushed.stream_id)
        assert late.outcome == pb.PickResponse.OK
        assert await client.pull_all(late.response_id) == waiting

        # The pull in progress completes, slowly, with every byte.
        while (message := await pull.read()) is not grpc.aio.EOF:
            received.append(message.chunk)
            await asyncio.sleep(0.02)
        assert b"".join(received) == body
        assert sum(map(len, received)) == pick.body_total_bytes

        await asyncio.wait_for(drain, grace_s)
        assert time.monotonic() - started < grace_s
    finally:
        if not drain.done():
            drain.cancel()
    assert bodies_held(picker)


async def test_drain_is_bounded_by_the_grace_with_a_stalled_pull(
    start_picker: PickerFactory,
) -> None:
    grace_s = 1.0
    picker = await start_picker(shutdown_grace_s=grace_s)
    body = sized_chat_body(16 * MiB)
    pushed = await push(picker, body, chunk_size=MiB)
    pick = await picker.client.pick(pushed.stream_id)
    pull = picker.client.stub.PullBody(pb.PullBodyRequest(response_id=pick.response_id))
    assert (await pull.read()) is not grpc.aio.EOF  # then the consumer stops reading

    started = time.monotonic()
    await asyncio.wait_for(picker.app.drain_and_stop(), grace_s + SETTLE_S)
    assert time.monotonic() - started >= grace_s * 0.9, "the drain did not wait for the pull"
    # The stalled pull was ended by the stop, and its body released.
    with pytest.raises(grpc.aio.AioRpcError):
        while await pull.read() is not grpc.aio.EOF:
            pass
    await wait_until(lambda: bodies_held(picker))


async def test_a_drain_waits_for_a_pick_under_way_and_lets_its_body_be_pulled(
    start_picker: PickerFactory,
) -> None:
    """A Pick under way when the drain begins holds its body outside the store (taken, not
    yet parked): the drain waits for it and for its pull as for any body pushed before it.
    Before, the store read as idle, the server stopped, and the picked body's PullBody was
    refused UNAVAILABLE: a request lost that the drain had promised to finish."""
    picker = await start_picker(shutdown_grace_s=20.0)
    app, client = picker.app, picker.client
    body = dense_body()  # parsed in the parse worker
    pushed = await push(picker, body)
    with worker_stopped(picker):
        picking = asyncio.ensure_future(client.pick(pushed.stream_id))
        await wait_until(lambda: not app.store.is_pending(pushed.stream_id), what="taken")
        drain = asyncio.create_task(app.drain_and_stop())
        await wait_until(lambda: app.store.draining, what="the drain to refuse new bodies")
    try:
        pick = await picking
        assert pick.outcome == pb.PickResponse.OK
        assert await client.pull_all(pick.response_id) == body  # UNAVAILABLE before
        assert (await client.abort(pick.response_id)).released
        await asyncio.wait_for(drain, SETTLE_S)
    finally:
        if not drain.done():
            drain.cancel()
    assert bodies_held(picker)

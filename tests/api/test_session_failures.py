"""PickerSession's failures: the same statuses as PushBody, the stream's own rules, and
nothing held once a request fails or a stream ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from kinference import preparation, session_client
from kinference.errors import ServerBusy
from kinference.service import PickCall, PickerService, PickResult
from kinference.v1 import picker_pb2 as pb
from kinference.v1 import session_pb2 as spb
from tests.api.helpers import SETTLE_S, bodies_held, wait_until
from tests.api.session_helpers import (
    body_of,
    chunks_of,
    error_code,
    expect_error,
    opened,
    released,
    start,
    uploads,
)
from tests.conftest import PickerFactory, RunningPicker


async def test_failures_have_pushbodys_statuses_and_hold_nothing(
    start_picker: PickerFactory,
) -> None:
    picker = await start_picker(max_body_bytes=4096, max_buffered_bytes=6000)
    session = await opened(picker)
    big = b"x" * 5000
    error = await expect_error(session, chunks_of(big), start(None))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and error_code(error) == ""
    error = await expect_error(session, chunks_of(b"{}"), start(b"{}{}"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    # The server-wide budget: one open upload holds 4000 bytes, the next cannot get 4000.
    hold = asyncio.Event()

    async def held() -> AsyncIterator[bytes]:
        yield b"y" * 4000
        await hold.wait()

    holder = asyncio.create_task(session.push_and_pick(held(), start(None)))
    await wait_until(lambda: picker.app.store.budget.used >= 4000)
    error = await expect_error(session, chunks_of(b"z" * 4000), start(None))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_code(error) == ServerBusy.code
    holder.cancel()  # resets the request: the picker discards its upload
    await released(picker)
    body = body_of()
    pick, _ = await session.push_and_pick(chunks_of(body), start(body))  # the stream lives on
    assert pick.outcome == pb.PickResponse.OK
    await session.aclose(5)


async def test_an_idle_upload_times_out(start_picker: PickerFactory) -> None:
    picker = await start_picker(body_idle_timeout_s=0.2)
    session = await opened(picker)
    never = asyncio.Event()

    async def stalled() -> AsyncIterator[bytes]:
        yield b"{"
        await never.wait()

    error = await expect_error(session, stalled(), start(None))
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await released(picker)
    await session.aclose(5)


async def test_too_many_open_requests_are_refused_as_busy(start_picker: PickerFactory) -> None:
    picker = await start_picker(session_max_open_requests=3)
    session = await opened(picker)
    never = asyncio.Event()

    async def stalled() -> AsyncIterator[bytes]:
        yield b"{"
        await never.wait()

    open_ones = [
        asyncio.create_task(session.push_and_pick(stalled(), start(None))) for _ in range(3)
    ]
    await wait_until(lambda: uploads(picker) >= 3)
    error = await expect_error(session, chunks_of(b"{}"), start(None))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and error_code(error) == "server_busy"
    assert gauge(picker, "kinference_session_streams") == 1
    assert gauge(picker, "kinference_session_requests") == 3
    for task in open_ones:
        task.cancel()
    await asyncio.gather(*open_ones, return_exceptions=True)
    await released(picker)
    await wait_until(lambda: gauge(picker, "kinference_session_requests") == 0)
    await session.aclose(5)
    await wait_until(lambda: gauge(picker, "kinference_session_streams") == 0)


def gauge(picker: RunningPicker, name: str) -> float | None:
    return picker.app.metrics.registry.get_sample_value(name)


async def test_a_broken_stream_fails_its_requests_and_the_picker_lets_go(
    picker: RunningPicker,
) -> None:
    unsent: list[spb.ClientFrame] = []
    session = await opened(picker, unsent)
    never = asyncio.Event()

    async def stalled() -> AsyncIterator[bytes]:
        yield b'{"model": '
        await never.wait()

    body = body_of()
    picked, _ = await session.push_and_pick(chunks_of(body), start(body))
    waiting = asyncio.create_task(session.push_and_pick(stalled(), start(None)))
    uploading = asyncio.create_task(session.push_and_pick(stalled(), start(None)))
    await wait_until(lambda: uploads(picker) >= 2)
    abort = pb.AbortRequest(response_id=picked.response_id)
    session.report(spb.ClientFrame(abort=abort))  # queued, not yet written
    session._call.cancel()  # the connection breaks
    for task in (waiting, uploading):
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await asyncio.wait_for(task, 5)
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    assert not session.alive and [f.abort.response_id for f in unsent] == [picked.response_id]
    await picker.client.abort(picked.response_id)  # as the gateway sends an unsent report
    await released(picker)
    again = await opened(picker)  # a new stream serves the next requests
    pick, _ = await again.push_and_pick(chunks_of(body), start(body))
    assert pick.outcome == pb.PickResponse.OK
    await again.aclose(5)


async def test_a_pick_the_caller_never_heard_of_is_aborted(
    picker: RunningPicker, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kinference.api import session_outbox

    async def never_write(self: session_outbox.Outbox) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(session_outbox.Outbox, "run", never_write)
    session = await opened(picker)
    body = body_of()
    task = asyncio.create_task(session.push_and_pick(chunks_of(body), start(body)))
    await wait_until(lambda: len(picker.app.inflight) == 1)
    session._call.cancel()
    with pytest.raises(grpc.aio.AioRpcError):
        await task
    await released(picker)


async def test_stream_rule_breaks_end_the_stream(picker: RunningPicker) -> None:
    stub = session_client.spb_grpc.PickerSessionStub(picker.client.channel)
    for frames in (
        [spb.ClientFrame(id=1, start=spb.Start()), spb.ClientFrame(id=1, start=spb.Start())],
        [spb.ClientFrame(id=5, chunk=b"x")],
        [spb.ClientFrame()],
    ):
        call = stub.Session(None)
        await call.write(spb.ClientBatch(frames=frames))
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            async for _ in call:
                pass
        assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    await released(picker)


async def test_draining_ends_streams_once_their_picks_are_answered(
    picker: RunningPicker,
) -> None:
    session = await opened(picker)
    body = body_of()
    pick, _ = await session.push_and_pick(chunks_of(body), start(body))
    assert pick.outcome == pb.PickResponse.OK
    picker.app.store.draining = True
    error = await expect_error(session, chunks_of(body), start(body))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    picker.app.session.close()
    await wait_until(lambda: not session.alive)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await opened(picker)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_message_that_is_not_a_batch_ends_the_stream(picker: RunningPicker) -> None:
    method = "/kinference.v1.PickerSession/Session"
    session = picker.client.channel.stream_stream(
        method, request_serializer=lambda raw: raw, response_deserializer=lambda raw: raw
    )
    call = session(None)
    await call.write(b"\xff\xff\xff not protobuf")
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        async for _ in call:
            pass
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_pick_that_fails_unexpectedly_is_answered(
    picker: RunningPicker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pick that raises what no protocol error is (a bug's exception) fails its request
    UNKNOWN, as the Picker service's Pick would; before, the caller waited for an answer
    until the stream ended."""

    async def failing(self: PickerService, call: PickCall) -> PickResult:
        self.store.release(self.store.take(call.stream_id))
        raise RuntimeError("a bug")

    monkeypatch.setattr(PickerService, "pick_off_loop", failing)
    session = await opened(picker)
    body = body_of()
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await asyncio.wait_for(session.push_and_pick(chunks_of(body), start(body)), SETTLE_S)
    assert failed.value.code() == grpc.StatusCode.UNKNOWN
    assert session.alive  # the stream serves the next requests
    await released(picker)
    await session.aclose(5)


@pytest.mark.parametrize("service", ["Picker", "PickerSession"])
async def test_a_parse_that_fails_unexpectedly_leaves_no_body_bytes_held(
    picker: RunningPicker, monkeypatch: pytest.MonkeyPatch, service: str
) -> None:
    """The body's parse raising what no malformed body raises (a bug's exception) fails
    the Pick UNKNOWN and returns the body's bytes to the server-wide budget. Before, they
    stayed counted for the process's life (each such Pick a leak; enough of them and
    every push is refused RESOURCE_EXHAUSTED)."""

    def failing(body: object, path: object = None) -> object:
        raise RuntimeError("a bug")

    monkeypatch.setattr(preparation, "parse_request", failing)
    body = body_of()
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        if service == "Picker":
            pushed = await picker.client.push([body])
            await picker.client.pick(pushed.stream_id)
        else:
            session = await opened(picker)
            await asyncio.wait_for(session.push_and_pick(chunks_of(body), start(body)), SETTLE_S)
    assert failed.value.code() == grpc.StatusCode.UNKNOWN
    await wait_until(lambda: bodies_held(picker), what="no body bytes held")  # 111 before

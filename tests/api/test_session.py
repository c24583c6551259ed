"""kinference.v1.PickerSession over a real server: many requests on one stream, each
answered with its own pick, its reports applied, and a picker without it told apart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from kinference.session_client import SessionClient
from kinference.v1 import picker_pb2 as pb
from kinference.v1 import session_pb2 as spb
from kinference.v1 import session_pb2_grpc as spb_grpc
from tests.api.helpers import bodies_held, nothing_held, sized_chat_body, wait_until
from tests.api.session_helpers import (
    body_of,
    chunks_of,
    opened,
    released,
    start,
    uploads,
)
from tests.conftest import MODEL, RunningPicker


async def test_a_request_is_picked_with_its_body_inline_and_reported(picker: RunningPicker) -> None:
    session = await opened(picker)
    body = body_of()
    pick, extras = await session.push_and_pick(chunks_of(body[:10], body[10:]), start(body))
    assert pick.outcome == pb.PickResponse.OK and pick.response_id
    assert extras.body == body and picker.app.store.held_bodies == 0
    assert len(picker.app.inflight) == 1
    first = pb.ReportFirstTokenRequest(response_id=pick.response_id, observed_ttft_ms=5)
    session.report(spb.ClientFrame(first_token=first), first_token_at=0.0)
    final = pb.ReportFinalTokenRequest(response_id=pick.response_id, model=MODEL)
    session.report(spb.ClientFrame(final_token=final))
    await released(picker)
    for kind in ("first_token", "final_token"):
        assert picker.metric("kinference_reports_total", {"kind": kind, "known": "true"}) == 1
    await session.aclose(5)


async def test_a_body_over_the_inline_limit_is_pulled(picker: RunningPicker) -> None:
    session = await opened(picker)
    body = body_of()
    pick, extras = await session.push_and_pick(chunks_of(body), start(body, inline=10))
    assert extras.body is None
    assert await picker.client.pull_all(pick.response_id) == body
    await session.aclose(5)


async def test_outcomes_carry_their_reason_codes(picker: RunningPicker) -> None:
    session = await opened(picker)
    body = body_of(model="no-such-model")
    pick, extras = await session.push_and_pick(chunks_of(body), start(body))
    assert pick.outcome == pb.PickResponse.NO_WORKERS and extras.code.value == "unknown_model"
    junk = b"not json"
    pick, extras = await session.push_and_pick(chunks_of(junk), start(junk))
    assert pick.outcome == pb.PickResponse.BAD_REQUEST and extras.code.value == "malformed"
    await released(picker)
    await session.aclose(5)


@pytest.mark.parametrize("concurrency", [16, 64])
async def test_requests_in_flight_together_each_get_their_own_answer(
    picker: RunningPicker, concurrency: int
) -> None:
    session = await opened(picker)
    gate = asyncio.Event()

    async def one(index: int) -> None:
        body = body_of(f"request number {index}")

        async def slowly() -> AsyncIterator[bytes]:
            yield body[: index % 7 + 1]
            await gate.wait()  # every request is open before any ends
            yield body[index % 7 + 1 :]

        pick, extras = await session.push_and_pick(slowly(), start(body))
        assert extras.body == body  # its own body, not another request's
        final = pb.ReportFinalTokenRequest(response_id=pick.response_id, model=MODEL)
        session.report(spb.ClientFrame(final_token=final))

    tasks = [asyncio.create_task(one(index)) for index in range(concurrency)]
    await wait_until(lambda: uploads(picker) >= concurrency)
    gate.set()
    await asyncio.gather(*tasks)
    await released(picker)
    await session.aclose(5)


async def test_a_picker_without_the_service_answers_unimplemented() -> None:
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            assert await SessionClient.open(channel, lambda frames: None) is None
    finally:
        await server.stop(None)


async def test_a_caller_that_does_not_read_stops_the_reading() -> None:
    from kinference.api import session_outbox

    written: list[spb.ServerBatch] = []
    blocked = asyncio.Event()

    async def write(batch: spb.ServerBatch) -> None:
        written.append(batch)
        await blocked.wait()  # the caller's window is full

    outbox = session_outbox.Outbox(write, max_queued=3, release=lambda nbytes: None)
    writer = asyncio.create_task(outbox.run())
    outbox.put(spb.ServerFrame(id=1))
    await wait_until(lambda: len(written) == 1)
    for request_id in (2, 3, 4):
        outbox.put(spb.ServerFrame(id=request_id))
    room = asyncio.create_task(outbox.room())
    await asyncio.sleep(0)
    assert not room.done()  # the reader waits here
    blocked.set()
    await asyncio.wait_for(room, 5)
    outbox.close()
    await asyncio.wait_for(writer, 5)
    assert [[f.id for f in batch.frames] for batch in written] == [[1], [2, 3, 4]]


async def test_closing_sends_the_reports_still_held(picker: RunningPicker) -> None:
    session = await opened(picker)
    body = body_of()
    pick, _ = await session.push_and_pick(chunks_of(body), start(body))
    final = pb.ReportFinalTokenRequest(response_id=pick.response_id, model=MODEL)
    session.report(spb.ClientFrame(final_token=final))  # held for company
    await session.aclose(5)  # flushed, half-closed, the picker's end awaited
    assert picker.metric("kinference_reports_total", {"kind": "final_token", "known": "true"}) == 1
    assert nothing_held(picker)


async def unread_answers(picker: RunningPicker, inline: int, count: int) -> tuple[Any, list[bytes]]:
    """A raw stream (gRPC's default limits) that sent `count` requests asking for bodies
    of `inline` bytes inline, all picked, and read no answer yet; and the bodies sent."""
    call = spb_grpc.PickerSessionStub(picker.client.channel).Session()
    await call.initial_metadata()
    sent = [sized_chat_body(inline - 100, tag=f"request {n} ") for n in range(1, count + 1)]
    for request_id, body in enumerate(sent, start=1):
        begin = start(body, inline=inline)
        frame = spb.ClientFrame(id=request_id, start=begin, chunk=body, end=True)
        await call.write(spb.ClientBatch(frames=[frame]))
    await wait_until(lambda: len(picker.app.inflight) == count, what="every request picked")
    return call, sent


async def read_and_end(picker: RunningPicker, call: Any, sent: list[bytes]) -> None:
    """Read every answer (each body as sent), abort the picks, end the stream."""
    answers: dict[int, spb.ServerFrame] = {}
    while len(answers) < len(sent):
        batch = await call.read()
        answers.update((frame.id, frame) for frame in batch.frames)
    assert [answers[n].body for n in range(1, len(sent) + 1)] == sent
    for frame in answers.values():
        assert (await picker.client.abort(frame.pick.response_id)).released
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF
    await released(picker)


async def test_answers_read_late_come_in_messages_a_default_channel_takes(
    picker: RunningPicker,
) -> None:
    """A caller that reads its answers late (its loop busy) finds many queued, each with a
    body inline: they come in messages under gRPC's default 4 MiB receive limit. Before,
    one message carried all that were queued (8 MiB and more here) and the caller's
    channel failed the stream with RESOURCE_EXHAUSTED, its answered picks left in flight."""
    call, sent = await unread_answers(picker, 256 * 1024, 64)
    await read_and_end(picker, call, sent)  # RESOURCE_EXHAUSTED before the fix


async def test_answers_a_caller_does_not_read_stay_in_the_body_budget(
    picker: RunningPicker,
) -> None:
    """Bodies sent inline in answers the caller has not read yet are held by the picker,
    and counted in its server-wide body budget until written, as a body being pulled is.
    Before, an inline body left the budget at its pick: a caller that read nothing had its
    stream hold up to max_queued_frames MiB (4 GiB) past the budget."""
    call, sent = await unread_answers(picker, 512 * 1024, 48)
    streams = picker.app.session._streams
    unread = sum(len(frame.body) for stream in streams for frame in stream.outbox.unwritten())
    assert unread > 0  # the caller read nothing: answers wait in the picker
    assert picker.app.store.budget.used >= unread  # 0 before
    await read_and_end(picker, call, sent)


async def test_answers_unread_when_the_stream_breaks_leave_the_budget(
    picker: RunningPicker,
) -> None:
    """The same answers, the caller gone before reading them: no body stays held (the
    answers written before live on, as after a PushBody, until a report or the TTL)."""
    call, _ = await unread_answers(picker, 512 * 1024, 48)
    call.cancel()
    await wait_until(lambda: bodies_held(picker), what="no body held")

"""Releasing what a request holds: Abort, reports, TTL reclaim and abandonment at every stage."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from kinference.client import PickerClient
from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import (
    Code,
    KiB,
    MiB,
    assert_code,
    chat_body,
    chunked,
    held_push,
    pick_ok,
    pull_status,
    push,
    push_metadata,
    sized_chat_body,
    status_of,
    wait_nothing_held,
    wait_until,
)
from tests.conftest import MODEL, PickerFactory, RunningPicker

# --- Abort --------------------------------------------------------------------------------


async def test_abort_releases_a_picked_body(picker: RunningPicker) -> None:
    pick = await pick_ok(picker, sized_chat_body(256 * KiB))
    assert picker.app.store.budget.used > 0
    assert len(picker.app.inflight) == 1
    response = await picker.client.abort(pick.response_id, detail="client went away")
    assert response.released
    await wait_nothing_held(picker)
    assert_code(await pull_status(picker, pick.response_id), Code.NOT_FOUND)


async def test_repeated_abort_is_not_found(picker: RunningPicker) -> None:
    pick = await pick_ok(picker)
    assert (await picker.client.abort(pick.response_id)).released
    for reason in (pb.AbortRequest.NOT_DISPATCHED, pb.AbortRequest.PULL_FAILED):
        error = await status_of(picker.client.abort(pick.response_id, reason))
        assert_code(error, Code.NOT_FOUND)


@pytest.mark.parametrize("response_id", [0, 1, 424242, (1 << 64) - 1])
async def test_abort_of_unknown_id_is_not_found(picker: RunningPicker, response_id: int) -> None:
    assert_code(await status_of(picker.client.abort(response_id)), Code.NOT_FOUND)


async def test_abort_names_responses_not_streams(picker: RunningPicker) -> None:
    """Abort with a stream id answers NOT_FOUND and leaves the pushed body alone."""
    body = chat_body()
    pushed = await push(picker, body)
    assert_code(await status_of(picker.client.abort(pushed.stream_id)), Code.NOT_FOUND)
    pick = await picker.client.pick(pushed.stream_id)
    assert pick.outcome == pb.PickResponse.OK
    assert await picker.client.pull_all(pick.response_id) == body


async def test_abort_after_pull_before_final_report_releases(picker: RunningPicker) -> None:
    body = chat_body()
    pick = await pick_ok(picker, body)
    assert await picker.client.pull_all(pick.response_id) == body
    assert len(picker.app.inflight) == 1
    response = await picker.client.abort(
        pick.response_id, pb.AbortRequest.BACKEND_UNRESOLVED, detail="no such backend"
    )
    assert response.released
    await wait_nothing_held(picker)
    assert_code(await status_of(picker.client.abort(pick.response_id)), Code.NOT_FOUND)


async def test_abort_after_final_report_is_not_found(picker: RunningPicker) -> None:
    pick = await pick_ok(picker)
    await picker.client.pull_all(pick.response_id)
    assert (await picker.client.final_token(pick.response_id, model=MODEL)).acknowledged
    assert_code(await status_of(picker.client.abort(pick.response_id)), Code.NOT_FOUND)
    await wait_nothing_held(picker)


@pytest.mark.parametrize("reason", [*pb.AbortRequest.Reason.values(), 99])
async def test_abort_accepts_every_reason(picker: RunningPicker, reason: int) -> None:
    pick = await pick_ok(picker)
    request = pb.AbortRequest(
        response_id=pick.response_id, reason=reason, detail="d" * 10_000, client_request_id="r"
    )
    assert (await picker.client.stub.Abort(request)).released
    await wait_nothing_held(picker)


# --- reports ------------------------------------------------------------------------------


async def test_reports_for_a_live_request_are_acknowledged(picker: RunningPicker) -> None:
    pick = await pick_ok(picker)
    await picker.client.pull_all(pick.response_id)
    first = await picker.client.first_token(pick.response_id, ttft_ms=120, upstream_status=200)
    assert first.acknowledged
    final = await picker.client.final_token(
        pick.response_id,
        model=MODEL,
        prompt_tokens=100,
        completion_tokens=20,
        cached_tokens=64,
        itl_bucket_counts=[3, 5, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
    )
    assert final.acknowledged
    await wait_nothing_held(picker)


async def test_final_report_without_gaps_is_acknowledged(picker: RunningPicker) -> None:
    """A response of fewer than two chunks reports no ITL buckets at all."""
    pick = await pick_ok(picker)
    await picker.client.pull_all(pick.response_id)
    assert (await picker.client.final_token(pick.response_id, model=MODEL)).acknowledged


@pytest.mark.parametrize(
    ("counts", "layout"),
    [([1] * 14, 1), ([1] * 16, 1), ([1], 1), ([1] * 15, 2), ([1] * 15, 0)],
    ids=["14_buckets", "16_buckets", "1_bucket", "unknown_layout", "no_layout"],
)
async def test_final_report_with_wrong_itl_buckets_is_invalid_argument(
    picker: RunningPicker, counts: list[int], layout: int
) -> None:
    pick = await pick_ok(picker)
    await picker.client.pull_all(pick.response_id)
    request = pb.ReportFinalTokenRequest(
        response_id=pick.response_id,
        model=MODEL,
        itl_bucket_counts=counts,
        itl_bucket_layout=layout,
    )
    error = await status_of(picker.client.stub.ReportFinalToken(request))
    assert_code(error, Code.INVALID_ARGUMENT)
    # Refused, the report taught nothing, but the request is over: nothing stays held
    # until its TTL, and a later report finds it released.
    await wait_nothing_held(picker)
    final = await picker.client.final_token(
        pick.response_id, model=MODEL, itl_bucket_counts=[1] * 15
    )
    assert not final.acknowledged


# --- TTL ----------------------------------------------------------------------------------


async def test_unpicked_body_is_reclaimed_by_ttl(start_picker: PickerFactory) -> None:
    picker = await start_picker(body_ttl_s=0.3)
    pushed = await push(picker, sized_chat_body(200 * KiB))
    await wait_nothing_held(picker)
    assert_code(await status_of(picker.client.pick(pushed.stream_id)), Code.NOT_FOUND)


async def test_picked_but_unpulled_body_is_reclaimed_by_ttl(start_picker: PickerFactory) -> None:
    picker = await start_picker(body_ttl_s=0.5)
    pick = await pick_ok(picker, sized_chat_body(200 * KiB))
    assert len(picker.app.inflight) == 1
    # Budget, held bodies and the in-flight count all go back to zero with no call from us.
    await wait_nothing_held(picker)
    assert picker.app.inflight.per_endpoint() == {}
    assert_code(await pull_status(picker, pick.response_id), Code.NOT_FOUND)
    assert_code(await status_of(picker.client.abort(pick.response_id)), Code.NOT_FOUND)


async def test_long_steady_push_outlasting_the_ttl_is_kept(start_picker: PickerFactory) -> None:
    """The body TTL starts when the body is complete, not when its upload began."""
    ttl_s = 0.5
    picker = await start_picker(body_ttl_s=ttl_s)
    body = sized_chat_body(8 * KiB)

    async def paced() -> AsyncIterator[bytes]:
        for chunk in chunked(body, KiB):
            yield chunk
            await asyncio.sleep(0.1)  # the upload's pace: 8 chunks take longer than the TTL

    loop = asyncio.get_running_loop()
    started = loop.time()
    pushed = await picker.client.push(paced(), declared_length=len(body))
    assert loop.time() - started > ttl_s
    pick = await picker.client.pick(pushed.stream_id)
    assert pick.outcome == pb.PickResponse.OK
    assert await picker.client.pull_all(pick.response_id) == body


# --- abandonment --------------------------------------------------------------------------


async def test_abandonment_at_every_stage_leaves_nothing_behind(
    start_picker: PickerFactory,
) -> None:
    """Requests dropped with no notice at every stage; the TTLs reclaim everything."""
    picker = await start_picker(body_ttl_s=0.5, request_ttl_s=0.5, body_idle_timeout_s=1.0)
    client, store = picker.client, picker.app.store
    other = PickerClient(picker.target)
    big = sized_chat_body(16 * MiB)
    head = chunked(big, MiB)

    # 1. A push reset part way, one that just stops sending (no reset, no half-close), and
    #    one whose connection goes away.
    reset = held_push(picker, head[:3], push_metadata(len(big)))
    stalled = held_push(picker, head[:2], push_metadata(len(big)))
    lost_push = held_push(picker, head[:2], push_metadata(len(big)), client=other)
    await wait_until(lambda: store.budget.used == 7 * MiB, what="the three uploads to arrive")
    await reset.reset()
    # 2. Pushed, never picked.
    await push(picker, sized_chat_body(100 * KiB))
    # 3. Picked, never pulled.
    await pick_ok(picker, sized_chat_body(100 * KiB))
    # 4. Pulled part way, then the stream is reset.
    mid_pull = await pick_ok(picker, big)
    call = client.stub.PullBody(pb.PullBodyRequest(response_id=mid_pull.response_id))
    assert (await call.read()) is not grpc.aio.EOF
    call.cancel()
    # 5. Pulled in full, never reported.
    done = await pick_ok(picker)
    await client.pull_all(done.response_id)
    # 6. Pulled part way on a connection that then goes away.
    lost_pull = await pick_ok(picker, big)
    other_call = other.stub.PullBody(pb.PullBodyRequest(response_id=lost_pull.response_id))
    assert (await other_call.read()) is not grpc.aio.EOF
    await other.close()

    await wait_nothing_held(picker)
    assert_code(await stalled.error(), Code.DEADLINE_EXCEEDED)
    with pytest.raises((asyncio.CancelledError, grpc.aio.AioRpcError)):
        await lost_push.call
    assert_code(await pull_status(picker, mid_pull.response_id), Code.NOT_FOUND)
    assert_code(await status_of(client.abort(done.response_id)), Code.NOT_FOUND)

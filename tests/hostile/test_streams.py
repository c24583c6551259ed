"""KINFERENCE_MAX_CONCURRENT_STREAMS: what gRPC does with calls beyond the limit.

The server announces the limit in its HTTP/2 SETTINGS; gRPC's client transport then holds
further calls on that connection until a stream ends, rather than failing them. These tests
pin that behaviour down over a real connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from kinference.client import PickerClient
from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import (
    CORE_TRANSPORT_LOST,
    chat_body,
    held_push,
    until,
    wait_nothing_held,
)
from tests.conftest import PickerFactory

LIMIT = 2
T = TypeVar("T")
# How long a queued call is watched for running early. Only a wrong "ran" can come out of
# this wait (a slow machine makes it pass more easily, never fail), so it is no timed check.
WATCH_S = 0.5


async def test_calls_beyond_the_limit_wait_for_a_stream_to_end(
    start_picker: PickerFactory,
) -> None:
    picker = await start_picker(max_concurrent_streams=LIMIT)
    async with PickerClient(picker.target) as client:
        await client.channel.channel_ready()
        releases = [asyncio.Event() for _ in range(LIMIT)]
        held = [held_push(picker, [b"{}"], release=release, client=client) for release in releases]
        assert await until(lambda: picker.app.store.budget.used == 2 * LIMIT, 10.0)
        queued = asyncio.ensure_future(client.pick(0))  # INVALID_ARGUMENT once it runs
        done, _ = await asyncio.wait([queued], timeout=WATCH_S)
        assert not done, "a call beyond the stream limit ran before a stream ended"
        assert picker.app.store.budget.used == 2 * LIMIT  # the queued call never arrived
        releases[0].set()  # the first push half-closes and completes: a stream frees up
        pushed = [await held[0].call]
        error = await _error_of(queued)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        releases[1].set()
        pushed.append(await held[1].call)
        for body in pushed:  # `{}` is no inference request: its Pick releases it
            pick = await client.pick(body.stream_id)
            assert pick.outcome == pb.PickResponse.BAD_REQUEST
    await wait_nothing_held(picker)


async def test_under_churn_refused_streams_are_unavailable_and_safe_to_retry(
    start_picker: PickerFactory,
) -> None:
    """With calls ending and starting all the time, the client may open a stream the moment
    it sees one end, before the server has counted it gone: the server refuses it
    (RST_STREAM REFUSED_STREAM, surfacing as UNAVAILABLE, or now and then as grpc-core's
    INTERNAL "Internal error from Core" when the reset races the client's first write,
    grpc/grpc#36066). A refused stream never reached the servicer, so retrying that one
    call is safe: were it not, a retried push would leave a body held, a retried Pick or
    pull would find its id gone. Nothing else ever fails."""
    picker = await start_picker(max_concurrent_streams=LIMIT)
    refusals: list[str] = []
    lost_in_core = 0

    async def retried(call: Callable[[], Awaitable[T]]) -> T:
        nonlocal lost_in_core
        while True:
            try:
                return await call()
            except grpc.aio.AioRpcError as error:
                details = error.details() or ""
                if error.code() == grpc.StatusCode.INTERNAL and CORE_TRANSPORT_LOST in details:
                    lost_in_core += 1
                    continue
                if error.code() != grpc.StatusCode.UNAVAILABLE or "RST_STREAM" not in details:
                    raise
                refusals.append(details)

    async with PickerClient(picker.target) as client:

        async def flow(i: int) -> None:
            body = chat_body(content=f"request {i}")
            pushed = await retried(lambda: client.push([body], declared_length=len(body)))
            pick = await retried(lambda: client.pick(pushed.stream_id))
            assert pick.outcome == pb.PickResponse.OK
            assert await retried(lambda: client.pull_all(pick.response_id)) == body
            await retried(lambda: client.final_token(pick.response_id))

        await asyncio.gather(*(flow(i) for i in range(40)))
    print(f"{len(refusals)} refused, {lost_in_core} lost in grpc-core")
    assert all("error code 7" in text for text in refusals), refusals  # REFUSED_STREAM = 7
    await wait_nothing_held(picker)


async def _error_of(call: asyncio.Future[pb.PickResponse]) -> grpc.aio.AioRpcError:
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return error
    raise AssertionError("Pick of stream id 0 succeeded")

"""PushBody conformance: ids, declared length, chunk limit, budgets, idle timeout, resets."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from typing import cast

import grpc
import pytest

from kinference.api.extensions import error_code
from kinference.client import PickerClient
from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import (
    HOLD_S,
    Code,
    HeldPush,
    KiB,
    MiB,
    assert_code,
    bodies_held,
    chat_body,
    chunked,
    held_push,
    push,
    push_error,
    push_metadata,
    sized_chat_body,
    until,
    wait_until,
)
from tests.conftest import PickerFactory, RunningPicker

ID_SPACE = 1 << 64


def assert_random_ids(ids: Sequence[int]) -> None:
    """Ids a caller cannot guess: non-zero, distinct, unordered, spread over 64 bits.

    Each bound below fails for uniformly random ids with probability below 1e-5.
    """
    n = len(ids)
    assert all(0 < i < ID_SPACE for i in ids), "ids must be non-zero uint64"
    assert len(set(ids)) == n, "ids must be distinct"
    ascents = sum(b > a for a, b in itertools.pairwise(ids))
    # A random sequence rises about half the time; a counter (or a clock) always does.
    assert n * 0.3 < ascents < n * 0.7, f"ids look ordered ({ascents} ascents of {n - 1})"
    strides = {b - a for a, b in itertools.pairwise(ids)}
    assert len(strides) > n * 0.9, "ids advance by a few fixed strides"
    # Spread over the whole space: every eighth of it is used, nothing sits in the low 40 bits,
    # and the lowest bit is not fixed.
    eighths = [sum(1 for i in ids if i >> 61 == k) for k in range(8)]
    assert min(eighths) >= n // 40, f"ids cluster in part of the 64-bit space: {eighths}"
    assert sum(i < 1 << 40 for i in ids) == 0, "ids are small numbers"
    odd = sum(i & 1 for i in ids)
    assert n * 0.3 < odd < n * 0.7, "the low bit of ids is not random"


async def test_stream_ids_are_random_and_never_zero(picker: RunningPicker) -> None:
    body = chat_body()
    ids = [(await push(picker, body)).stream_id for _ in range(200)]
    assert_random_ids(ids)


async def test_push_reports_total_bytes_with_and_without_declared_length(
    picker: RunningPicker,
) -> None:
    body = sized_chat_body(300 * KiB)
    declared = await push(picker, body, chunk_size=7 * KiB, declared=True)
    chunked_upload = await push(picker, body, chunk_size=100 * KiB, declared=False)
    assert declared.total_bytes == chunked_upload.total_bytes == len(body)
    assert declared.stream_id != chunked_upload.stream_id


async def test_client_request_id_metadata_is_accepted(picker: RunningPicker) -> None:
    body = chat_body()
    pushed = await picker.client.push(
        chunked(body, 10), declared_length=len(body), client_request_id="req-42"
    )
    assert pushed.total_bytes == len(body)
    pick = await picker.client.pick(pushed.stream_id, client_request_id="req-42")
    assert pick.outcome == pb.PickResponse.OK


# --- declared length ----------------------------------------------------------------------


async def test_body_longer_than_declared_is_invalid_argument(picker: RunningPicker) -> None:
    body = chat_body()
    # The excess arrives in the last chunk; the stream then stays open until the server fails it.
    error = await push_error(picker, chunked(body, 16), push_metadata(len(body) - 1))
    assert_code(error, Code.INVALID_ARGUMENT)
    await wait_until(lambda: bodies_held(picker), what="the rejected body to be dropped")


async def test_body_shorter_than_declared_is_invalid_argument(picker: RunningPicker) -> None:
    body = chat_body()
    # A clean half-close after fewer bytes than declared: the caller stopped, but the body
    # is not complete.
    error = await status_of_push(picker, chunked(body, 16), declared=len(body) + 1)
    assert_code(error, Code.INVALID_ARGUMENT)
    error = await status_of_push(picker, [b""], declared=5)
    assert_code(error, Code.INVALID_ARGUMENT)
    await wait_until(lambda: bodies_held(picker), what="the rejected body to be dropped")


async def test_exact_declared_length_including_zero_is_accepted(picker: RunningPicker) -> None:
    empty = await picker.client.push([b""], declared_length=0)
    assert empty.stream_id != 0
    assert empty.total_bytes == 0
    body = chat_body()
    pushed = await picker.client.push(chunked(body, 1), declared_length=len(body))
    assert pushed.total_bytes == len(body)


@pytest.mark.parametrize("declared", ["abc", "-1", "1.5", "1e3", "0x10", "", "12 34"])
async def test_non_numeric_declared_length_is_invalid_argument(
    picker: RunningPicker, declared: str
) -> None:
    body = chat_body()
    # Refused from the metadata alone: nothing is written until the server has answered.
    error = await push_error(picker, [], push_metadata(declared))
    assert_code(error, Code.INVALID_ARGUMENT)
    # The same body with a correct length still goes through.
    assert (await push(picker, body)).total_bytes == len(body)
    await wait_until(lambda: picker.app.store.held_bodies == 1)


async def status_of_push(
    picker: RunningPicker, chunks: Sequence[bytes], declared: int
) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await picker.client.push(chunks, declared_length=declared)
    return info.value


# --- chunk limit and budgets --------------------------------------------------------------


@pytest.mark.parametrize("chunk_bytes", [MiB + 1, 2 * MiB, 8 * MiB])
async def test_chunk_over_1_mib_is_resource_exhausted_even_within_budget(
    picker: RunningPicker, chunk_bytes: int
) -> None:
    # Budgets are 64 MiB per request and 1 GiB server-wide: the body fits, the chunk does not.
    # 1 MiB + 1 reaches the handler; larger chunks are refused by gRPC's receive limit while
    # the client is still sending them. Either way the oversized chunk is the last write, so
    # no write is issued after the server has ended the call (grpc/grpc#36066), and the
    # client sees the server's own status.
    assert chunk_bytes < picker.app.settings.max_body_bytes
    error = await push_error(picker, [b"{", b"x" * chunk_bytes], push_metadata(chunk_bytes + 1))
    assert_code(error, Code.RESOURCE_EXHAUSTED)
    await wait_until(lambda: bodies_held(picker), what="the rejected body to be dropped")


async def test_chunks_of_exactly_1_mib_are_accepted(picker: RunningPicker) -> None:
    body = sized_chat_body(3 * MiB)
    pushed = await push(picker, body, chunk_size=MiB)
    assert pushed.total_bytes == len(body)


async def test_per_request_budget(start_picker: PickerFactory) -> None:
    limit = 100 * KiB
    picker = await start_picker(max_body_bytes=limit)
    at_limit = sized_chat_body(limit)
    assert (await push(picker, at_limit, chunk_size=30 * KiB)).total_bytes == limit

    # A chunked upload (no declared length) that grows past the limit.
    over = sized_chat_body(limit + 1)
    error = await push_error(picker, chunked(over, 60 * KiB))
    assert_code(error, Code.RESOURCE_EXHAUSTED)
    assert not said_code(error)  # this body will never fit: no `server_busy`

    # A declared length over the limit is refused before any byte is sent.
    error = await push_error(picker, [], push_metadata(limit + 1))
    assert_code(error, Code.RESOURCE_EXHAUSTED)
    error = await push_error(picker, [], push_metadata(10**30))
    assert_code(error, Code.RESOURCE_EXHAUSTED)

    # Only the accepted body is held.
    await wait_until(lambda: picker.app.store.budget.used == limit)
    assert picker.app.store.held_bodies == 1


@pytest.mark.parametrize("stage", ["being_pushed", "awaiting_pick", "awaiting_pull"])
async def test_server_wide_budget_counts_every_held_body(
    start_picker: PickerFactory, stage: str
) -> None:
    """One 40 KiB body in `stage` leaves no room for a 170 KiB one under a 200 KiB budget
    (which also holds the first one's parse at Pick: its copy in the parse worker and the
    estimated objects, ~3x its text)."""
    picker = await start_picker(max_body_bytes=170 * KiB, max_buffered_bytes=200 * KiB)
    store = picker.app.store
    first = sized_chat_body(40 * KiB, tag="first")
    second = sized_chat_body(170 * KiB, tag="second")

    release_push = asyncio.Event()
    open_push = None
    pick = None
    if stage == "being_pushed":
        # All bytes sent, no half-close yet: the upload is still in progress.
        open_push = held_push(picker, chunked(first, 40 * KiB), release=release_push)
    else:
        pushed = await push(picker, first)
        if stage == "awaiting_pull":
            pick = await picker.client.pick(pushed.stream_id)
            assert pick.outcome == pb.PickResponse.OK
    await wait_until(lambda: store.budget.used == len(first), what="the first body to be held")
    assert picker.metric("kinference_buffered_bytes") == len(first)

    # Declared or not, with the excess in a later chunk, the second body does not fit.
    error = await push_error(picker, chunked(second, 40 * KiB), push_metadata(len(second)))
    assert_code(error, Code.RESOURCE_EXHAUSTED)
    assert said_code(error) == "server_busy"  # it may fit later: callers may retry
    error = await push_error(picker, chunked(second, 40 * KiB))
    assert_code(error, Code.RESOURCE_EXHAUSTED)
    assert said_code(error) == "server_busy"
    await wait_until(lambda: store.budget.used == len(first), what="the rejected bytes released")

    # Release the first body the way its stage allows; the budget is then free again.
    if open_push is not None:
        release_push.set()
        pushed = await open_push.call
        await open_push.finished.wait()
        pick = await picker.client.pick(pushed.stream_id)
        assert pick.outcome == pb.PickResponse.OK
    if pick is None:
        pick = await picker.client.pick(pushed.stream_id)
        assert pick.outcome == pb.PickResponse.OK
    assert await picker.client.pull_all(pick.response_id) == first
    await wait_until(lambda: store.budget.used == 0, what="the pulled body to be released")

    again = await push(picker, second)
    assert again.total_bytes == len(second)
    assert store.budget.used == len(second)


# --- idle timeout -------------------------------------------------------------------------


async def test_idle_push_is_deadline_exceeded(start_picker: PickerFactory) -> None:
    picker = await start_picker(body_idle_timeout_s=0.3)
    body = chat_body()
    # Some bytes, then silence without a half-close.
    error = await push_error(picker, [body[:10]], push_metadata(len(body)))
    assert_code(error, Code.DEADLINE_EXCEEDED)
    # Silence from the start.
    error = await push_error(picker, [], push_metadata(len(body)))
    assert_code(error, Code.DEADLINE_EXCEEDED)
    await wait_until(lambda: bodies_held(picker), what="the idle uploads to be dropped")


async def test_slow_but_steady_push_outlasting_the_idle_budget_succeeds(
    start_picker: PickerFactory,
) -> None:
    idle_s = 0.6
    picker = await start_picker(body_idle_timeout_s=idle_s)
    body = sized_chat_body(11 * KiB)
    chunks = chunked(body, KiB)
    gap_s = 0.1  # well under the idle budget; 11 chunks take about twice as long as it
    release = asyncio.Event()
    slow = held_push(picker, chunks, push_metadata(len(body)), release=release, gap_s=gap_s)
    release.set()  # half-close right after the last chunk
    loop = asyncio.get_running_loop()
    started = loop.time()
    pushed = await slow.call
    elapsed = loop.time() - started
    await slow.finished.wait()
    assert pushed.total_bytes == len(body)
    assert elapsed > idle_s, "the upload was meant to last longer than the idle budget"
    pick = await picker.client.pick(pushed.stream_id)
    assert pick.outcome == pb.PickResponse.OK
    assert await picker.client.pull_all(pick.response_id) == body


# --- resets -------------------------------------------------------------------------------


async def test_reset_push_leaves_nothing_behind(picker: RunningPicker) -> None:
    store = picker.app.store
    body = sized_chat_body(3 * MiB)
    sent = chunked(body, 512 * KiB)[:-1]  # all but the last chunk, and no half-close
    upload = held_push(picker, sent, push_metadata(len(body)))
    await wait_until(lambda: store.budget.used == sum(map(len, sent)), what="the bytes to arrive")
    assert store.held_bodies == 0, "a body still being pushed must not be pickable"
    await upload.reset()
    await wait_until(lambda: bodies_held(picker), what="the reset upload to be discarded")


async def test_reset_after_the_last_chunk_is_never_taken_as_complete(
    picker: RunningPicker,
) -> None:
    """Every byte sent but the stream reset instead of half-closed: no body is stored.

    The body TTL is the default 60 s, so a partial body wrongly committed would still be
    held when the store is checked.
    """
    store = picker.app.store
    body = chat_body(content="y" * 5000)
    for attempt in range(30):
        upload = held_push(picker, chunked(body, 1000))
        if attempt % 2:  # half the time, reset as soon as the server holds every byte
            await wait_until(lambda: store.budget.used == len(body))
        else:  # the other half, reset at once, racing the chunks
            await asyncio.sleep(0)
        await upload.reset()
    await wait_until(lambda: bodies_held(picker), what="every reset upload to be discarded")
    assert picker.metric("kinference_picks_total", {"outcome": "ok"}) == 0


async def test_reset_after_every_declared_byte_is_never_kept(picker: RunningPicker) -> None:
    """A reset arriving after every declared byte can still read as a clean half-close:
    nothing may be kept for it either (a stored body nobody can name leaks until its TTL)."""
    store = picker.app.store
    body = chat_body(content="z" * 5000)
    for attempt in range(30):
        upload = held_push(picker, chunked(body, 1000), push_metadata(len(body)))
        if attempt % 2:
            await wait_until(lambda: store.budget.used == len(body))
        else:
            await asyncio.sleep(0)
        await upload.reset()
    await wait_until(lambda: bodies_held(picker), what="every reset upload to be discarded")
    assert picker.metric("kinference_picks_total", {"outcome": "ok"}) == 0


async def test_declared_length_given_twice(picker: RunningPicker) -> None:
    body = chat_body()
    twice_same = push_metadata(len(body)) * 2
    pushed = await picker.client.stub.PushBody(
        iter([pb.BodyChunk(chunk=body)]), metadata=twice_same
    )
    assert pushed.total_bytes == len(body)
    conflicting = [*push_metadata(len(body)), *push_metadata(len(body) + 1)]
    error = await push_error(picker, [], conflicting)
    assert_code(error, Code.INVALID_ARGUMENT)


async def test_gzip_chunk_over_1_mib_once_decompressed_is_resource_exhausted(
    picker: RunningPicker,
) -> None:
    """The per-message limit applies to the decoded chunk, not to its compressed size."""
    channel = grpc.aio.insecure_channel(picker.target, compression=grpc.Compression.Gzip)
    gzip_client = PickerClient(picker.target, channel=channel)
    try:
        for size in (MiB + 1, 8 * MiB):  # compresses to a few KiB
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await gzip_client.push([b"{", b"0" * size])
            assert_code(info.value, Code.RESOURCE_EXHAUSTED)
    finally:
        await gzip_client.close()
    await wait_until(lambda: bodies_held(picker), what="the rejected uploads to be dropped")


# --- BodyChunk encodings ------------------------------------------------------------------


def raw_push(picker: RunningPicker, messages: Sequence[bytes], *, hold: bool) -> HeldPush:
    """A PushBody writing already-serialized messages; with `hold`, held open like
    `held_push`, else half-closed right after the last one."""
    method = picker.client.channel.stream_unary(
        "/kinference.v1.Picker/PushBody",
        request_serializer=lambda raw: raw,
        response_deserializer=pb.PushBodyResponse.FromString,
    )
    holder: list[HeldPush] = []

    async def requests() -> AsyncIterator[bytes]:
        try:
            for message in messages:
                yield message
            if hold:
                await until(holder[0].call.done, HOLD_S)
        finally:
            holder[0].finished.set()

    holder.append(HeldPush(method(requests())))
    return holder[0]


async def test_any_valid_body_chunk_encoding_is_accepted(picker: RunningPicker) -> None:
    body = chat_body(content="encodings")
    a, b, c, d = body[:10], body[10:20], body[20:30], body[30:]
    messages = [
        b"",  # an empty BodyChunk: no field at all
        b"\x0a" + bytes([len(a)]) + a + b"\x10\x01",  # an unknown field after the chunk
        b"\x0a\x01x\x0a" + bytes([len(b)]) + b,  # the field twice: the last one wins
        b"\x0a" + bytes([0x80 | len(c), 0x00]) + c,  # a non-minimal length varint
        pb.BodyChunk(chunk=d).SerializeToString(),
    ]
    upload = raw_push(picker, messages, hold=False)
    pushed = await upload.call
    assert pushed.total_bytes == len(body)
    pick = await picker.client.pick(pushed.stream_id)
    assert pick.outcome == pb.PickResponse.OK
    assert await picker.client.pull_all(pick.response_id) == body


@pytest.mark.parametrize(
    "message",
    [b"\x0a\x05ab", b"\xff\xff\xff", b"\x0a"],
    ids=["truncated_chunk", "garbage", "tag_without_length"],
)
async def test_a_message_that_is_not_a_body_chunk_is_invalid_argument(
    picker: RunningPicker, message: bytes
) -> None:
    upload = raw_push(picker, [pb.BodyChunk(chunk=b"{").SerializeToString(), message], hold=True)
    assert_code(await upload.error(), Code.INVALID_ARGUMENT)
    await wait_until(lambda: bodies_held(picker), what="the rejected upload to be dropped")


def said_code(error: grpc.aio.AioRpcError) -> str:
    """The `kinference-error-code` of a failed call (grpc.aio's error holds a
    grpc.aio.Metadata, whatever its stub says)."""
    return error_code(cast(grpc.aio.Metadata, error.trailing_metadata()))

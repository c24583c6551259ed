"""PullBody conformance: exact bytes, chunk limit, single shot, abandonment, backpressure."""

from __future__ import annotations

import asyncio
import hashlib
import random
from typing import Any

import grpc
import pytest

from kinference.client import PickerClient
from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import (
    Code,
    KiB,
    MiB,
    StreamedBody,
    assert_code,
    bodies_held,
    chat_body,
    pick_ok,
    pull_status,
    push,
    rss_bytes,
    sized_chat_body,
    wait_until,
)
from tests.conftest import MODEL, PickerFactory, RunningPicker


def open_pull(client: PickerClient, response_id: int) -> Any:
    return client.stub.PullBody(pb.PullBodyRequest(response_id=response_id))


async def read_all(call: Any) -> list[bytes]:
    chunks = []
    while (message := await call.read()) is not grpc.aio.EOF:
        chunks.append(message.chunk)
    return chunks


def random_chunking(body: bytes, rng: random.Random) -> list[bytes]:
    """Cut a body at random: 1-byte slivers, small pieces, and chunks of exactly 1 MiB."""
    chunks, pos = [], 0
    while pos < len(body):
        size = rng.choice([1, 7, 100, 4 * KiB, 60 * KiB, 300 * KiB, MiB])
        chunks.append(body[pos : pos + size])
        pos += size
    return chunks


@pytest.mark.parametrize("size", [100, 64 * KiB, 5 * MiB + 123])
async def test_pull_streams_exactly_body_total_bytes_in_chunks_of_at_most_1_mib(
    picker: RunningPicker, size: int
) -> None:
    rng = random.Random(size)
    body = sized_chat_body(size) if size > 100 else chat_body(content="z" * 40)
    pushed = await picker.client.push(random_chunking(body, rng), declared_length=len(body))
    pick = await picker.client.pick(pushed.stream_id)
    assert pick.outcome == pb.PickResponse.OK
    assert pick.body_total_bytes == len(body)  # no rewrite is configured

    chunks = await read_all(open_pull(picker.client, pick.response_id))
    assert all(len(c) <= MiB for c in chunks), max(map(len, chunks))
    assert sum(map(len, chunks)) == pick.body_total_bytes
    assert b"".join(chunks) == body
    await wait_until(lambda: bodies_held(picker), what="the pulled body to be released")


async def test_many_tiny_chunks_round_trip(picker: RunningPicker) -> None:
    body = sized_chat_body(40 * KiB)
    pushed = await picker.client.push(
        [body[i : i + 10] for i in range(0, len(body), 10)], declared_length=len(body)
    )
    pick = await picker.client.pick(pushed.stream_id)
    chunks = await read_all(open_pull(picker.client, pick.response_id))
    assert all(len(c) <= MiB for c in chunks)
    assert b"".join(chunks) == body


async def test_pull_is_single_shot(picker: RunningPicker) -> None:
    body = sized_chat_body(64 * KiB)
    pick = await pick_ok(picker, body)
    assert await picker.client.pull_all(pick.response_id) == body
    for _ in range(2):
        assert_code(await pull_status(picker, pick.response_id), Code.NOT_FOUND)


async def test_second_pull_while_the_first_is_streaming_is_not_found(
    picker: RunningPicker,
) -> None:
    body = sized_chat_body(16 * MiB)
    pick = await pick_ok(picker, body)
    first = open_pull(picker.client, pick.response_id)
    head = await first.read()
    assert head is not grpc.aio.EOF
    assert_code(await pull_status(picker, pick.response_id), Code.NOT_FOUND)
    rest = await read_all(first)
    assert head.chunk + b"".join(rest) == body


@pytest.mark.parametrize("response_id", [0, 1, 987654321, (1 << 64) - 1])
async def test_pull_of_unknown_id_is_not_found(picker: RunningPicker, response_id: int) -> None:
    assert_code(await pull_status(picker, response_id), Code.NOT_FOUND)


async def test_pull_of_a_stream_id_is_not_found(picker: RunningPicker) -> None:
    """Stream ids and response ids are different names: a stream id pulls nothing."""
    pushed = await push(picker, chat_body())
    assert_code(await pull_status(picker, pushed.stream_id), Code.NOT_FOUND)
    pick = await picker.client.pick(pushed.stream_id)  # the body is still there for Pick
    assert pick.outcome == pb.PickResponse.OK


async def test_abandoned_pull_releases_the_body(picker: RunningPicker) -> None:
    store = picker.app.store
    body = sized_chat_body(32 * MiB)
    pick = await pick_ok(picker, body)
    call = open_pull(picker.client, pick.response_id)
    first = await call.read()
    assert first is not grpc.aio.EOF
    assert 0 < len(first.chunk) <= MiB
    # Mid-stream: the server still holds the unsent part (flow control stops it).
    assert store.budget.used > 0
    assert store.held_bodies == 1
    call.cancel()
    await wait_until(lambda: bodies_held(picker), what="the abandoned pull's body to be released")
    assert_code(await pull_status(picker, pick.response_id), Code.NOT_FOUND)
    # The request is still in flight until the caller says otherwise.
    assert (await picker.client.abort(pick.response_id)).released


async def test_pull_abandoned_by_closing_the_connection_releases_the_body(
    picker: RunningPicker,
) -> None:
    body = sized_chat_body(32 * MiB)
    pick = await pick_ok(picker, body)
    other = PickerClient(picker.target)
    call = open_pull(other, pick.response_id)
    assert (await call.read()) is not grpc.aio.EOF
    await other.close()  # no cancel, no notice: the connection just goes away
    await wait_until(lambda: bodies_held(picker), what="the abandoned pull's body to be released")
    assert_code(await pull_status(picker, pick.response_id), Code.NOT_FOUND)


async def test_slow_consumer_of_a_100_mib_body(start_picker: PickerFactory) -> None:
    """Backpressure: the server sends as the consumer reads, and keeps no second copy.

    Server and client share this process, and the client never holds the whole body (it is
    generated and hashed chunk by chunk), so resident memory beyond one body is the server's.
    """
    picker = await start_picker(max_body_bytes=128 * MiB)
    store = picker.app.store
    rss_before = rss_bytes()
    source = StreamedBody(total_chunks=100)
    pushed = await picker.client.push(source.chunks())
    size = source.size
    assert size > 100 * MiB
    assert pushed.total_bytes == size
    assert store.budget.used == size

    pick = await picker.client.pick(pushed.stream_id)
    assert pick.outcome == pb.PickResponse.OK
    assert pick.requested_model == MODEL
    assert pick.body_total_bytes == size
    rss_held = rss_bytes()

    digest, received, chunks = hashlib.sha256(), 0, 0
    peak_rss, last_used, max_ahead = rss_held, size, 0
    call = open_pull(picker.client, pick.response_id)
    while (message := await call.read()) is not grpc.aio.EOF:
        chunk = message.chunk
        assert len(chunk) <= MiB
        digest.update(chunk)
        received += len(chunk)
        chunks += 1
        used = store.budget.used
        assert used <= last_used <= size, "buffered bytes grew during the pull"
        last_used = used
        # Bytes the server has let go of but this consumer has not read yet: what sits in
        # transport buffers. Flow control keeps that to a window, not the whole body.
        max_ahead = max(max_ahead, (size - used) - received)
        peak_rss = max(peak_rss, rss_bytes())
        await asyncio.sleep(0.01 if chunks % 10 else 0.1)  # a slow upstream, with stalls
    assert received == size
    assert digest.hexdigest() == source.sha256
    assert max_ahead <= 32 * MiB, f"the server ran {max_ahead / MiB:.1f} MiB ahead"
    assert peak_rss - rss_held <= 32 * MiB, (
        f"memory grew by {(peak_rss - rss_held) / MiB:.0f} MiB while pulling a held body"
    )
    assert peak_rss - rss_before <= 1.5 * size, (
        f"{(peak_rss - rss_before) / MiB:.0f} MiB resident for one {size / MiB:.0f} MiB body"
    )
    await wait_until(lambda: bodies_held(picker), what="the pulled body to be released")


async def test_ttl_does_not_cut_a_slow_pull(start_picker: PickerFactory) -> None:
    """A body being pulled is not reclaimed by the body TTL, however slow the consumer."""
    ttl_s = 0.5
    picker = await start_picker(body_ttl_s=ttl_s)
    body = sized_chat_body(12 * MiB)
    pushed = await push(picker, body, chunk_size=MiB)
    pick = await picker.client.pick(pushed.stream_id)
    call = open_pull(picker.client, pick.response_id)
    loop = asyncio.get_running_loop()
    started = loop.time()
    chunks = []
    while (message := await call.read()) is not grpc.aio.EOF:
        chunks.append(message.chunk)
        await asyncio.sleep(0.1)  # the consumer's pace; 12 chunks outlast the TTL
    assert loop.time() - started > ttl_s * 2
    assert b"".join(chunks) == body

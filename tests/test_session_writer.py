"""The PickerSession writer: batches under the message limit, and a bound on the body
bytes it queues while the stream is slower than the uploads."""

from __future__ import annotations

import asyncio

from kinference.session_writer import MAX_BATCH_BYTES, Writer
from kinference.v1 import picker_pb2 as pb
from kinference.v1 import session_pb2 as spb
from tests.api.helpers import wait_until


class Stream:
    """A stream whose writes wait until `flow` is set (the picker's window is full)."""

    def __init__(self) -> None:
        self.batches: list[spb.ClientBatch] = []
        self.flow = asyncio.Event()

    async def write(self, batch: spb.ClientBatch) -> None:
        self.batches.append(batch)
        await self.flow.wait()

    @property
    def chunk_bytes(self) -> int:
        return sum(len(f.chunk) for batch in self.batches for f in batch.frames)


def chunk(request_id: int, size: int) -> spb.ClientFrame:
    return spb.ClientFrame(id=request_id, chunk=b"x" * size)


async def test_uploads_wait_while_the_stream_holds_their_bound() -> None:
    stream, unsent = Stream(), list[spb.ClientFrame]()
    writer = Writer(stream.write, lambda why: None, unsent.extend, max_pending_bytes=100_000)
    writer.put(chunk(1, 10))  # written at once, then the write waits
    await wait_until(lambda: len(stream.batches) == 1)
    for _ in range(3):
        writer.put(chunk(1, 40_000))
    assert writer.full
    room = asyncio.create_task(writer.room())
    await asyncio.sleep(0)
    assert not room.done()  # an upload waits here
    stream.flow.set()
    async with asyncio.timeout(5):
        await room
    await wait_until(lambda: stream.chunk_bytes == 120_010)
    assert not writer.full
    writer.stop()


async def test_a_stopped_stream_frees_the_waiting_uploads_and_hands_back_reports() -> None:
    stream, unsent = Stream(), list[spb.ClientFrame]()
    writer = Writer(stream.write, lambda why: None, unsent.extend, max_pending_bytes=1_000)
    writer.put(chunk(1, 10))
    await wait_until(lambda: len(stream.batches) == 1)
    writer.put(chunk(2, 2_000))
    report = spb.ClientFrame(abort=pb.AbortRequest(response_id=7))
    writer.put(report, lazy=True)
    room = asyncio.create_task(writer.room())
    await asyncio.sleep(0)
    assert not room.done()
    writer.stop()
    async with asyncio.timeout(5):
        await room
    assert not writer.full
    assert unsent == [report]


async def test_many_small_chunks_share_messages_under_the_limit() -> None:
    stream, unsent = Stream(), list[spb.ClientFrame]()
    stream.flow.set()
    writer = Writer(stream.write, lambda why: None, unsent.extend)
    for request_id in range(1, 2001):
        writer.put(chunk(request_id, 2_000))
    await wait_until(lambda: stream.chunk_bytes == 2000 * 2000)
    assert all(batch.ByteSize() <= MAX_BATCH_BYTES + 64 for batch in stream.batches)
    assert len(stream.batches) < 20  # batched, not one message per frame
    assert not writer.full
    writer.stop()

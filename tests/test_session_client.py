"""The caller's side of PickerSession over a scripted stream: a request given up while its
answer was on the way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc

from kinference.session_client import SessionClient
from kinference.v1 import picker_pb2 as pb
from kinference.v1 import session_pb2 as spb
from tests.api.helpers import wait_until


class Call:
    """A PickerSession call whose answers the test sends (`answer`)."""

    def __init__(self) -> None:
        self.written: list[spb.ClientFrame] = []
        self._answers: asyncio.Queue[Any] = asyncio.Queue()

    async def write(self, batch: spb.ClientBatch) -> None:
        self.written.extend(batch.frames)

    async def read(self) -> Any:
        answer = await self._answers.get()
        return grpc.aio.EOF if answer is None else answer  # type: ignore[attr-defined]

    def answer(self, *frames: spb.ServerFrame) -> None:
        self._answers.put_nowait(spb.ServerBatch(frames=frames))

    async def done_writing(self) -> None:
        self._answers.put_nowait(None)  # the picker ends the stream in turn

    def cancel(self) -> None:
        pass

    def kinds(self) -> list[str]:
        return [f.WhichOneof("report") or ("reset" if f.reset else "") for f in self.written]


async def body() -> AsyncIterator[bytes]:
    yield b"{}"


async def test_an_answer_that_crossed_the_reset_is_aborted() -> None:
    """The client hangs up while its pick is under way: a reset goes out (before: none, the
    awaited answer was cancelled with the task and taken for an answered one); the picker's
    answer crossed it (the picker drops a reset for a request it answered), so the pick it
    made is aborted here (before: dropped). Either way, before, the pick was held as load
    until its TTL: 218 of 300 clients hanging up at once in remote mode."""
    call = Call()
    session = SessionClient(call, lambda frames: None)
    asking = asyncio.create_task(session.push_and_pick(body(), spb.Start(declared_length=2)))
    await wait_until(lambda: any(frame.end for frame in call.written), what="the body sent")
    asking.cancel()  # the client went away
    await asyncio.gather(asking, return_exceptions=True)
    await wait_until(lambda: "reset" in call.kinds(), what="the reset")
    call.answer(spb.ServerFrame(id=1, pick=pb.PickResponse(response_id=7)))
    await wait_until(lambda: "abort" in call.kinds(), what="the pick aborted")
    aborts = [frame.abort for frame in call.written if frame.HasField("abort")]
    assert [(abort.response_id, abort.reason) for abort in aborts] == [
        (7, pb.AbortRequest.NOT_DISPATCHED)
    ]
    await session.aclose(0.1)


async def test_an_answer_that_came_as_its_caller_was_cancelled_is_aborted() -> None:
    """The answer arrives after the caller's task was cancelled but before it ran: its
    awaited future is cancelled already, so the answer is nobody's and its pick is aborted
    (before: dropped, while the reset that followed was dropped by the picker, the request
    being answered: held as load until its TTL)."""
    call = Call()
    session = SessionClient(call, lambda frames: None)
    asking = asyncio.create_task(session.push_and_pick(body(), spb.Start(declared_length=2)))
    await wait_until(lambda: any(frame.end for frame in call.written), what="the body sent")
    call.answer(spb.ServerFrame(id=1, pick=pb.PickResponse(response_id=8)))  # read first
    asking.cancel()  # its answer future is cancelled now; the task runs after the read
    await asyncio.gather(asking, return_exceptions=True)
    await wait_until(lambda: "abort" in call.kinds(), what="the pick aborted")
    aborts = [frame.abort.response_id for frame in call.written if frame.HasField("abort")]
    assert aborts == [8]
    await session.aclose(0.1)

"""A caller's side of kinference.v1.PickerSession: every request over one long-lived stream.

`SessionClient.open()` opens the stream on a channel and waits for the picker's first
answer: None when the picker does not serve the extension (UNIMPLEMENTED), so the caller
uses the Picker service. Then `push_and_pick` streams one body and returns its pick, and
`report` queues a report. Frames go out in batches (`session_writer`); a request failed by
the picker raises the `grpc.aio.AioRpcError` its PushBody would have, and one under way when
the stream breaks or ends raises UNAVAILABLE; the caller opens a new stream for the next
requests.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterable, Callable
from typing import Any

import grpc

from kinference.api.extensions import ERROR_CODE, PickExtras, read_pick_metadata
from kinference.session_writer import Writer
from kinference.v1 import picker_pb2 as pb
from kinference.v1 import session_pb2 as spb
from kinference.v1 import session_pb2_grpc as spb_grpc

# Body bytes per frame: a frame shares its message with others, and a message stays under
# the picker's 1 MiB decode limit.
FRAME_CHUNK_BYTES = 256 * 1024
_STATUS = {code.value[0]: code for code in grpc.StatusCode}
Picked = tuple[pb.PickResponse, PickExtras]
Unsent = Callable[[list[spb.ClientFrame]], None]


def rpc_error(code: grpc.StatusCode, message: str, error_code: str = "") -> grpc.aio.AioRpcError:
    trailing = grpc.aio.Metadata(*([(ERROR_CODE, error_code)] if error_code else []))
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, message, None)


class SessionClient:
    """One open PickerSession stream; `alive` turns False for good when it ends."""

    def __init__(self, call: Any, unsent: Unsent) -> None:
        self._call = call
        self._waiting: dict[int, asyncio.Future[spb.ServerFrame]] = {}
        self._last_id = 0
        self._error: grpc.aio.AioRpcError | None = None
        self._writer = Writer(call.write, self._write_failed, unsent)
        self._reader = asyncio.create_task(self._read(), name="kinference-session-reader")

    @classmethod
    async def open(cls, channel: grpc.aio.Channel, unsent: Unsent) -> SessionClient | None:
        """A stream on `channel`; None when the picker does not serve PickerSession.
        `unsent` gets the reports that were queued when the stream broke."""
        call = spb_grpc.PickerSessionStub(channel).Session(None)  # None: written by `Writer`
        await call.initial_metadata()  # the picker sends it at once; an error ends the call
        if call.done():
            code = await call.code()
            if code == grpc.StatusCode.UNIMPLEMENTED:
                return None
            raise rpc_error(code, await call.details() or "the session ended at once")
        return cls(call, unsent)

    @property
    def alive(self) -> bool:
        return self._error is None

    async def push_and_pick(self, chunks: AsyncIterable[bytes], start: spb.Start) -> Picked:
        """Stream one body in and return its pick; raises `grpc.aio.AioRpcError`."""
        if self._error is not None:
            raise self._error
        self._last_id += 1
        request_id = self._last_id
        answer: asyncio.Future[spb.ServerFrame] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = answer
        writer = self._writer
        put = writer.put
        put(spb.ClientFrame(id=request_id, start=start))
        upload = _Interruptible(answer)
        try:
            async for data in chunks:
                for at in range(0, len(data), FRAME_CHUNK_BYTES):
                    put(spb.ClientFrame(id=request_id, chunk=data[at : at + FRAME_CHUNK_BYTES]))
                if writer.full:  # the stream is slower than the bodies coming in
                    await writer.room()
            upload.done()
            put(spb.ClientFrame(id=request_id, end=True))
            frame = await answer
        except asyncio.CancelledError:
            self._gave_up(request_id, answer)
            upload.reraise()  # the picker failed the request while its body was coming
            raise
        except BaseException:
            self._gave_up(request_id, answer)
            raise
        return _picked(frame)

    def _gave_up(self, request_id: int, answer: asyncio.Future[spb.ServerFrame]) -> None:
        """The request ends here without its answer: the picker lets go of it too."""
        self._waiting.pop(request_id, None)
        if self._error is not None:
            return
        if not answer.done() or answer.cancelled():  # cancelled: the task awaiting it was
            answer.cancel()
            self._writer.put(spb.ClientFrame(id=request_id, reset=True))
        elif not answer.cancelled() and answer.exception() is None:
            response_id = answer.result().pick.response_id
            if response_id:  # picked, but nobody dispatches it
                abort = pb.AbortRequest(
                    response_id=response_id, reason=pb.AbortRequest.NOT_DISPATCHED
                )
                self._writer.put(spb.ClientFrame(abort=abort))

    def _unclaimed(self, frame: spb.ServerFrame) -> None:
        """An answer to a request given up while it crossed the caller's reset: the picker
        dropped the reset (the request was answered) and holds the pick as load, so it is
        aborted here (before, dropped: held until its TTL)."""
        if frame.pick.response_id and not frame.HasField("error"):
            abort = pb.AbortRequest(
                response_id=frame.pick.response_id, reason=pb.AbortRequest.NOT_DISPATCHED
            )
            self._writer.put(spb.ClientFrame(abort=abort))

    def report(self, frame: spb.ClientFrame, *, first_token_at: float | None = None) -> bool:
        """Queue a report (sent with the next batch, or within `session_writer.HOLD_S`);
        False when the stream is gone (send it another way)."""
        if self._error is not None:
            return False
        self._writer.put(frame, lazy=True, first_token_at=first_token_at)
        return True

    async def _read(self) -> None:
        error = rpc_error(grpc.StatusCode.UNAVAILABLE, "the picker session ended")
        try:
            while (batch := await self._call.read()) is not grpc.aio.EOF:  # type: ignore[attr-defined]
                waiting = self._waiting
                for frame in batch.frames:
                    answer = waiting.pop(frame.id, None)
                    if answer is None or answer.cancelled():  # its caller gave up, or is
                        self._unclaimed(frame)  # giving up (its task cancelled, not run yet)
                    elif not answer.done():
                        answer.set_result(frame)
        except grpc.aio.AioRpcError as exc:  # whatever broke it, the picker is unavailable
            details = f"{exc.code().name} {exc.details() or ''}".strip()
            error = rpc_error(grpc.StatusCode.UNAVAILABLE, f"the picker session broke: {details}")
        except asyncio.CancelledError:
            pass
        self._broken(error)

    def _write_failed(self, why: str) -> None:
        self._broken(rpc_error(grpc.StatusCode.UNAVAILABLE, f"the picker session broke: {why}"))

    def _broken(self, error: grpc.aio.AioRpcError) -> None:
        """The stream is gone: every request waiting on it fails now."""
        if self._error is not None:
            return
        self._error = error
        self._writer.stop()
        waiting, self._waiting = self._waiting, {}
        for answer in waiting.values():
            if not answer.done():
                answer.set_exception(error)
        self._call.cancel()

    async def aclose(self, timeout_s: float) -> None:
        """Send what is queued, half-close, and wait up to `timeout_s` for the picker to
        end the stream (it answers every pick under way first)."""
        if self._error is None:
            try:
                async with asyncio.timeout(timeout_s):
                    await self._writer.flush_and_close(self._call.done_writing)
                    await asyncio.shield(self._reader)
            except (TimeoutError, grpc.aio.AioRpcError):
                pass
        self._broken(rpc_error(grpc.StatusCode.UNAVAILABLE, "the picker session is closed"))
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)


class _Interruptible:
    """Cancels the task pushing a body when the picker fails its request meanwhile (a
    budget, the idle limit): the caller learns of it at once, not at its next chunk."""

    __slots__ = ("_interrupted", "_task", "_uploading")

    def __init__(self, answer: asyncio.Future[spb.ServerFrame]) -> None:
        self._task = asyncio.current_task()
        self._uploading = True
        self._interrupted: BaseException | None = None
        answer.add_done_callback(self._answered)

    def _answered(self, answer: asyncio.Future[spb.ServerFrame]) -> None:
        if not self._uploading or self._task is None or answer.cancelled():
            return
        if answer.exception() is not None or answer.result().HasField("error"):
            self._interrupted = answer.exception() or _error(answer.result().error)
            self._task.cancel()

    def done(self) -> None:
        self._uploading = False

    def reraise(self) -> None:
        """Raise the picker's error when the cancellation was this interruption only."""
        error = self._interrupted
        if error is not None and self._task is not None and self._task.uncancel() == 0:
            raise error from None


def _error(status: spb.Status) -> grpc.aio.AioRpcError:
    return rpc_error(
        _STATUS.get(status.code, grpc.StatusCode.UNKNOWN), status.message, status.error_code
    )


def _picked(frame: spb.ServerFrame) -> Picked:
    if frame.HasField("error"):
        raise _error(frame.error)
    extras = read_pick_metadata(frame.metadata.items())
    if frame.HasField("body"):
        extras = dataclasses.replace(extras, body=frame.body)
    return frame.pick, extras

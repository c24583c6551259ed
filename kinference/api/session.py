"""The kinference.v1.PickerSession servicer: many requests over one long-lived stream.

A thin adapter over the same `PickerService` calls the Picker servicer makes
(kinference.api.servicer): `begin_push`, `Upload.add`, `commit_push`, the shared pick
(kinference.api.picking) and the reports. A request's failure is a frame carrying the status
the PushBody would have ended with (kinference.api.status, the one mapping), and its
`kinference-error-code`. The stream's frames are read in order by one loop (`_Stream.run`);
picks run as tasks of their own, so a slow pick holds up no other request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import grpc

from kinference.api import convert, picking
from kinference.api.session_outbox import Outbox
from kinference.api.session_requests import Limits, Open, Requests, StreamFault
from kinference.api.status import status_code
from kinference.errors import PickerError
from kinference.metrics import Metrics
from kinference.service import PickerService
from kinference.v1 import session_pb2 as spb

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
_EOF: Any = grpc.aio.EOF  # type: ignore[attr-defined]  # missing from grpc-stubs
METHOD = "Session"


class SessionServicer:
    """Serves each PickerSession stream with a `_Stream` of its own."""

    def __init__(self, service: PickerService, metrics: Metrics, limits: Limits) -> None:
        self.service = service
        self.metrics = metrics
        self.limits = limits
        self._streams: set[_Stream] = set()
        self._closing = False

    async def Session(self, requests: Any, context: Context) -> None:
        if self._closing:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "instance is draining")
        await context.send_initial_metadata(())  # the caller knows at once it is served
        stream = _Stream(self, context)
        self._streams.add(stream)
        try:
            await stream.run()
        except StreamFault as fault:
            self.metrics.rpc_errors.labels(METHOD, "INVALID_ARGUMENT").inc()
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(fault))
        except asyncio.CancelledError:
            self.metrics.rpc_errors.labels(METHOD, "CANCELLED").inc()
            raise
        finally:
            self._streams.discard(stream)

    @property
    def streams(self) -> int:
        """Streams open now."""
        return len(self._streams)

    @property
    def open_requests(self) -> int:
        """Requests open now on every stream, from their `start` to their answer."""
        return sum(len(stream.requests) for stream in self._streams)

    def close(self) -> None:
        """Draining: every stream stops reading, answers the picks under way and ends
        (OK); new streams are refused (UNAVAILABLE). Call once no body is held."""
        self._closing = True
        for stream in self._streams:
            stream.stop()


class _Stream:
    """One stream: its open requests, its outbox, the frames read in order."""

    def __init__(self, servicer: SessionServicer, context: Context) -> None:
        self.service = servicer.service
        self.metrics = servicer.metrics
        self.context = context
        self.budget = servicer.service.store.budget
        self.outbox = Outbox(context.write, servicer.limits.max_queued_frames, self.budget.release)
        self.requests = Requests(self.service, servicer.limits, self._failed)
        self._picks: set[asyncio.Task[None]] = set()
        self._reading: asyncio.Task[None] | None = None

    async def run(self) -> None:
        writer = asyncio.create_task(self.outbox.run(), name="kinference-session-writer")
        self._reading = asyncio.create_task(self._read(), name="kinference-session-reader")
        try:
            try:
                await self._reading
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # the stream itself is cancelled (the caller went away)
            # The caller half-closed (or the picker drains): answer the picks under way,
            # then end the stream.
            self.requests.end_uploads()
            while self._picks:
                await asyncio.gather(*self._picks, return_exceptions=True)
            self.outbox.close()
            await writer
        finally:
            self._release(writer)

    def stop(self) -> None:
        """Read no more frames; `run` ends the stream once its picks are answered."""
        if self._reading is not None:
            self._reading.cancel()

    async def _read(self) -> None:
        context, observe = self.context, self.service.offload.observe
        while (batch := await context.read()) is not _EOF:
            if not isinstance(batch, spb.ClientBatch):
                raise StreamFault("a PickerSession message is not a ClientBatch")
            for frame in batch.frames:
                if frame.id:
                    observation = self.requests.frame(frame)
                    if observation is not None:  # a big chunk: scanned off the loop
                        self.requests.pause()
                        try:
                            await observe(observation)
                        finally:
                            self.requests.resume()
                    if frame.end:
                        self._ended(frame.id)
                else:
                    self._report(frame)
            await self.outbox.room()

    def _ended(self, request_id: int) -> None:
        opened = self.requests.committed(request_id)
        if opened is not None:
            task = asyncio.create_task(self._pick(opened), name="kinference-session-pick")
            opened.task = task
            self._picks.add(task)
            task.add_done_callback(self._picks.discard)

    async def _pick(self, opened: Open) -> None:
        try:
            answer = await picking.answer(self.service, opened.call, opened.inline_body_max)
        except PickerError as error:
            self._failed(opened.id, error)
            return
        except Exception as error:  # a bug's: answered all the same, as a Pick is (UNKNOWN)
            log.exception("the pick of a PickerSession request failed")
            message = f"unexpected {error!r}"[:200]
            self._answer_error(opened.id, grpc.StatusCode.UNKNOWN, message)
            return
        finally:
            self.requests.closed(opened.id)
        frame = spb.ServerFrame(id=opened.id, pick=answer.response, metadata=dict(answer.metadata))
        if answer.body is not None:
            frame.body = answer.body
            # Held until written, as a pull holds a body until sent (`Outbox`); it was
            # counted until now, so it is counted on whatever the budget holds.
            self.budget.reserve_unchecked(len(answer.body))
        self.outbox.put(frame)

    def _failed(self, request_id: int, error: PickerError) -> None:
        self._answer_error(request_id, status_code(error), str(error), error.code)

    def _answer_error(
        self, request_id: int, code: grpc.StatusCode, message: str, error_code: str = ""
    ) -> None:
        self.metrics.rpc_errors.labels(METHOD, code.name).inc()
        status = spb.Status(code=code.value[0], message=message, error_code=error_code)
        self.outbox.put(spb.ServerFrame(id=request_id, error=status))

    def _report(self, frame: spb.ClientFrame) -> None:
        """A report or Abort: applied, never answered (a failure is counted)."""
        service, kind = self.service, frame.WhichOneof("report")
        try:
            if kind == "first_token":
                first = frame.first_token
                service.first_token(
                    first.response_id,
                    first.observed_ttft_ms,
                    first.upstream_status,
                    ago_s=frame.first_token_ago_ms / 1000,
                )
            elif kind == "final_token":
                service.final_token(convert.final_report(frame.final_token))
            elif kind == "abort":
                abort = frame.abort
                service.abort(abort.response_id, convert.abort_reason(abort), abort.detail)
            else:
                raise StreamFault("a frame with neither a request id nor a report")
        except PickerError as error:
            self.metrics.rpc_errors.labels(f"{METHOD}.{kind}", status_code(error).name).inc()

    def _release(self, writer: asyncio.Task[None]) -> None:
        """The stream ended (or broke): nothing of its unanswered requests stays held."""
        writer.cancel()
        if self._reading is not None:
            self._reading.cancel()
        for task in list(self._picks):
            task.cancel()  # the pick's own cleanup releases its body
        self.requests.discard_all()
        for frame in self.outbox.unwritten():  # picked, but the caller never heard of it
            response_id = frame.pick.response_id
            if response_id:
                with contextlib.suppress(PickerError):  # released already (TTL)
                    detail = "the session ended before the answer"
                    self.service.abort(response_id, "NOT_DISPATCHED", detail)
        self.outbox.drop()

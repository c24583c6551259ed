"""The kinference.v1.Picker servicer: protobuf in, a call on the service, protobuf out."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import grpc

from kinference.api import convert, extensions, picking
from kinference.api.framing import MalformedChunk
from kinference.api.idle import IdleWatch
from kinference.api.status import grpc_errors
from kinference.bodies import Piece, Upload
from kinference.errors import IdleTimeout, InvalidArgument
from kinference.metrics import Metrics
from kinference.service import PickCall, PickerService
from kinference.v1 import picker_pb2 as pb

Context = grpc.aio.ServicerContext[Any, Any]
TrailingMetadata = list[tuple[str, str | bytes]]
_EOF: Any = grpc.aio.EOF  # type: ignore[attr-defined]  # missing from grpc-stubs


class PickerServicer:
    """Thin adapter; body chunks arrive and leave as raw payloads (see `api.framing`)."""

    def __init__(self, service: PickerService, metrics: Metrics, idle_timeout_s: float) -> None:
        self.service = service
        self.metrics = metrics
        self._idle_timeout_s = idle_timeout_s

    @grpc_errors("PushBody")
    async def PushBody(
        self, requests: AsyncIterator[bytes], context: Context
    ) -> pb.PushBodyResponse:
        metadata = context.invocation_metadata()
        declared, request_id = convert.push_metadata(metadata)
        asks = extensions.caller_asks(metadata)
        # Pick on push (extension): checked before any byte is held, like a Pick would be.
        call = convert.pick_on_push(asks.pick) if asks.pick is not None else None
        upload = self.service.begin_push(declared, request_id)
        try:
            await self._receive(upload, context)
            # A reset stream can read as a clean half-close with its cancellation a loop turn
            # behind (even after every declared byte arrived); this raises CancelledError on a
            # dead call, so no body of a reset push is ever kept.
            await context.send_initial_metadata(())
            path = extensions.request_path(metadata)
            stream_id, total = self.service.commit_push(upload, path)
        except BaseException:
            self.service.discard_push(upload)
            raise
        if call is not None:
            call = dataclasses.replace(call, stream_id=stream_id)
            picked, trailing = await self._picked(call, asks.inline_body_max)
            trailing.append((extensions.PICK, picked.SerializeToString()))
            context.set_trailing_metadata(trailing)
        return pb.PushBodyResponse(stream_id=stream_id, total_bytes=total)

    async def _receive(self, upload: Upload, context: Context) -> None:
        """Read chunks until the half-close; each chunk restarts the inter-chunk budget."""
        try:
            # One timer for the whole upload (`IdleWatch`): cheaper than a new timeout per
            # read or a timer moved per chunk, and a steady upload may take as long as it
            # needs.
            async with asyncio.timeout(None) as timeout:
                idle = IdleWatch(timeout, self._idle_timeout_s)
                try:
                    while (chunk := await context.read()) is not _EOF:
                        if isinstance(chunk, MalformedChunk):
                            raise InvalidArgument("a PushBody message is not a BodyChunk")
                        observation = upload.add(chunk)
                        if observation is not None:  # a big chunk: scanned off the loop,
                            idle.pause()  # which is the picker's time, not the caller's
                            try:
                                await self.service.offload.observe(observation)
                            finally:
                                idle.resume()
                        elif len(chunk):  # only body bytes are progress: empty chunks are not
                            idle.progress()
                finally:
                    idle.stop()
        except TimeoutError:
            raise IdleTimeout(
                f"no body bytes for {self._idle_timeout_s:g} s (inter-chunk budget)"
            ) from None

    @grpc_errors("Pick")
    async def Pick(self, request: pb.PickRequest, context: Context) -> pb.PickResponse:
        inline = extensions.caller_asks(context.invocation_metadata()).inline_body_max
        response, trailing = await self._picked(convert.pick_call(request), inline)
        if trailing:  # kinference's extensions (reason code, translation, body inline, ...)
            context.set_trailing_metadata(trailing)
        return response

    async def _picked(
        self, call: PickCall, inline_body_max: int
    ) -> tuple[pb.PickResponse, TrailingMetadata]:
        """The pick of `call`, and the extensions its answer's trailing metadata carries;
        a dispatched body of at most `inline_body_max` bytes among them, released here."""
        answer = await picking.answer(self.service, call, inline_body_max)
        trailing: TrailingMetadata = list(answer.metadata)
        if answer.body is not None:
            trailing.append((extensions.BODY, answer.body))
        return answer.response, trailing

    @grpc_errors("PullBody")
    async def PullBody(self, request: pb.PullBodyRequest, context: Context) -> None:
        pull = self.service.open_pull(request.response_id)
        completed = False
        try:
            for payload in pull.messages():
                await self._write(context, payload)  # HTTP/2 flow control paces the reader
            completed = True
        finally:
            self.service.close_pull(pull, completed=completed)

    @staticmethod
    async def _write(context: Context, payload: Piece) -> None:
        try:
            await context.write(payload)
        except asyncio.CancelledError:
            raise
        except Exception:
            # A caller that goes away while a write is blocked on flow control surfaces as
            # grpc's internal ExecuteBatchError rather than a cancellation; abandoning a pull
            # is allowed (spec), so treat it as one.
            if context.done() or context.cancelled():
                raise asyncio.CancelledError from None
            raise

    @grpc_errors("ReportFirstToken")
    async def ReportFirstToken(
        self, request: pb.ReportFirstTokenRequest, context: Context
    ) -> pb.ReportFirstTokenResponse:
        known = self.service.first_token(
            request.response_id, request.observed_ttft_ms, request.upstream_status
        )
        return pb.ReportFirstTokenResponse(acknowledged=known)

    @grpc_errors("ReportFinalToken")
    async def ReportFinalToken(
        self, request: pb.ReportFinalTokenRequest, context: Context
    ) -> pb.ReportFinalTokenResponse:
        first = extensions.caller_asks(context.invocation_metadata()).first_token
        if first is not None:  # the ReportFirstToken the caller folded into this one
            ttft_ms, status, ago_ms = first
            self.service.first_token(request.response_id, ttft_ms, status, ago_s=ago_ms / 1000)
        known = self.service.final_token(convert.final_report(request))
        return pb.ReportFinalTokenResponse(acknowledged=known)

    @grpc_errors("Abort")
    async def Abort(self, request: pb.AbortRequest, context: Context) -> pb.AbortResponse:
        self.service.abort(request.response_id, convert.abort_reason(request), request.detail)
        return pb.AbortResponse(released=True)

"""The kinference.v1.Picker servicer: protobuf in, a call on the service, protobuf out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc

from kinference.api import convert, extensions
from kinference.api.framing import MalformedChunk
from kinference.api.status import grpc_errors
from kinference.bodies import Piece, Upload
from kinference.errors import IdleTimeout, InvalidArgument
from kinference.metrics import Metrics
from kinference.service import PickerService
from kinference.v1 import picker_pb2 as pb

Context = grpc.aio.ServicerContext[Any, Any]
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
        return pb.PushBodyResponse(stream_id=stream_id, total_bytes=total)

    async def _receive(self, upload: Upload, context: Context) -> None:
        """Read chunks until the half-close; each chunk restarts the inter-chunk budget."""
        loop = asyncio.get_running_loop()
        try:
            # One timer for the whole upload, moved on at every chunk: cheaper than a new
            # timeout per read, and a steady upload may take as long as it needs.
            async with asyncio.timeout(self._idle_timeout_s) as idle:
                while (chunk := await context.read()) is not _EOF:
                    if isinstance(chunk, MalformedChunk):
                        raise InvalidArgument("a PushBody message is not a BodyChunk")
                    observation = upload.add(chunk)
                    if observation is not None:  # a big chunk: scanned off the loop
                        await self.service.offload.observe(observation)
                    if len(chunk):  # only body bytes are progress: empty chunks are not
                        idle.reschedule(loop.time() + self._idle_timeout_s)
        except TimeoutError:
            raise IdleTimeout(
                f"no body bytes for {self._idle_timeout_s:g} s (inter-chunk budget)"
            ) from None

    @grpc_errors("Pick")
    async def Pick(self, request: pb.PickRequest, context: Context) -> pb.PickResponse:
        result = await self.service.pick_off_loop(convert.pick_call(request))
        extras = convert.pick_extras(result)
        if extras is not None:  # kinference's extensions (reason code, translation, ...)
            context.set_trailing_metadata(extensions.pick_metadata(extras))
        return convert.pick_response(result)

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
        known = self.service.final_token(convert.final_report(request))
        return pb.ReportFinalTokenResponse(acknowledged=known)

    @grpc_errors("Abort")
    async def Abort(self, request: pb.AbortRequest, context: Context) -> pb.AbortResponse:
        self.service.abort(request.response_id, convert.abort_reason(request), request.detail)
        return pb.AbortResponse(released=True)

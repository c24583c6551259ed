"""The picker hosted in the gateway's process: the spec's flow as plain calls, no RPCs.

Same body store, routing core, in-flight table and Redis sharing as `kinference serve`
(kinference.app.App builds both), so a request routed here and one routed over the gRPC
service that the same process still serves count against the same state. A call that fails
raises the `grpc.aio.AioRpcError` the gRPC service would have answered with (the status
mapping of kinference.api.status), so the gateway maps errors the same way in both modes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import grpc

from kinference import itl_layout
from kinference.api import convert, extensions
from kinference.api.extensions import PickExtras
from kinference.api.status import status_code
from kinference.bodies import Upload
from kinference.errors import IdleTimeout, PickerError
from kinference.gateway.port import AbortReason, BodyChunks, PickAsk, Picked
from kinference.gateway.timing import TokenClock
from kinference.gateway.usage import Usage
from kinference.service import FinalReport, PickerService
from kinference.v1 import picker_pb2 as pb

log = logging.getLogger(__name__)


def rpc_error(error: PickerError) -> grpc.aio.AioRpcError:
    """The error a gRPC caller would have seen for `error`."""
    trailing = grpc.aio.Metadata(*extensions.error_metadata(error))
    return grpc.aio.AioRpcError(status_code(error), grpc.aio.Metadata(), trailing, str(error), None)


class LocalReports:
    """Reports applied at once: each is a few microseconds of bookkeeping, no I/O."""

    __slots__ = ("_response_id", "_service")

    def __init__(self, service: PickerService, response_id: int) -> None:
        self._service = service
        self._response_id = response_id

    def first_token(self, ttft_ms: int, upstream_status: int) -> None:
        self._guarded(self._service.first_token, self._response_id, ttft_ms, upstream_status)

    def final(self, usage: Usage, clock: TokenClock, fallback_model: str) -> None:
        counts = tuple(clock.itl_bucket_counts)
        report = FinalReport(
            response_id=self._response_id,
            model=usage.model or fallback_model,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cached_tokens=usage.cached_tokens,
            itl_bucket_counts=counts,
            itl_bucket_layout=itl_layout.LAYOUT if counts else 0,
        )
        self._guarded(self._service.final_token, report)

    def abort(self, reason: AbortReason, detail: str) -> None:
        name = pb.AbortRequest.Reason.Name(reason)
        self._guarded(self._service.abort, self._response_id, name, detail[:500])

    @staticmethod
    def _guarded(call: Callable[..., object], *args: object) -> None:
        try:
            call(*args)
        except PickerError as error:  # NotFound on Abort is normal: already released
            if status_code(error) != grpc.StatusCode.NOT_FOUND:
                log.warning("report failed: %s", error)
        except Exception:  # a report is best effort; the TTL covers a lost one
            log.exception("report failed")


class LocalPicker:
    """`PickerPort` over the `PickerService` of an `App` in this process."""

    def __init__(
        self,
        service: PickerService,
        *,
        idle_timeout_s: float,
        model_names: Callable[[], tuple[str, ...]],
        serving: Callable[[], bool],
    ) -> None:
        self.service = service
        self._idle_timeout_s = idle_timeout_s
        self._model_names = model_names
        self._serving = serving
        self._nothing_said = PickExtras()  # the usual OK's (frozen: one for every Pick)

    async def push(
        self,
        chunks: BodyChunks,
        *,
        declared_length: int | None,
        client_request_id: str,
        request_path: str = "",
    ) -> int:
        try:
            upload = self.service.begin_push(
                declared_length, convert.request_id_of(client_request_id)
            )
        except PickerError as error:
            raise rpc_error(error) from None
        try:
            if isinstance(chunks, list):
                await self._take(upload, chunks)
            else:
                await self._receive(upload, chunks)
            path = request_path if extensions.usable_path(request_path) else ""
            stream_id, _total = self.service.commit_push(upload, path)
        except PickerError as error:
            self.service.discard_push(upload)
            raise rpc_error(error) from None
        except BaseException:
            self.service.discard_push(upload)
            raise
        return stream_id

    async def push_and_pick(
        self,
        chunks: BodyChunks,
        *,
        declared_length: int | None,
        request_path: str,
        ask: PickAsk,
    ) -> tuple[int, Picked | None]:
        """`push`; the gateway then picks with plain calls (nothing to spare in-process)."""
        stream_id = await self.push(
            chunks,
            declared_length=declared_length,
            client_request_id=ask.client_request_id,
            request_path=request_path,
        )
        return stream_id, None

    async def _take(self, upload: Upload, chunks: list[bytes]) -> None:
        """A body at hand: nothing to wait for but a large chunk's scan off the loop, which
        the idle timeout bounds as it does while a body streams in (`_receive`)."""
        offload = self.service.offload
        for chunk in chunks:
            observation = upload.add(chunk)
            if observation is not None:  # a big chunk: scanned off the loop
                try:
                    async with asyncio.timeout(self._idle_timeout_s):
                        await offload.observe(observation)
                except TimeoutError:
                    raise self._idle_timeout() from None

    async def _receive(self, upload: Upload, chunks: AsyncIterator[bytes]) -> None:
        add, offload = upload.add, self.service.offload
        loop = asyncio.get_running_loop()
        try:  # as kinference.api.servicer receives a PushBody
            async with asyncio.timeout(self._idle_timeout_s) as idle:
                async for chunk in chunks:
                    observation = add(chunk)
                    if observation is not None:  # a big chunk: scanned off the loop
                        await offload.observe(observation)
                    if chunk:  # only body bytes are progress
                        idle.reschedule(loop.time() + self._idle_timeout_s)
        except TimeoutError:
            raise self._idle_timeout() from None

    def _idle_timeout(self) -> IdleTimeout:
        return IdleTimeout(f"no body bytes for {self._idle_timeout_s:g} s (inter-chunk budget)")

    async def pick(self, stream_id: int, ask: PickAsk) -> Picked:
        try:
            call = convert.pick_call_of(
                stream_id, qos_class=ask.qos, tenant=ask.tenant, pool=ask.pool,
                client_request_id=ask.client_request_id,
            )  # fmt: skip
            result = await self.service.pick_off_loop(call)
            return convert.pick_response(result), convert.pick_extras(result) or self._nothing_said
        except PickerError as error:
            raise rpc_error(error) from None

    async def pull(self, response_id: int) -> AsyncIterator[bytes | memoryview]:
        try:
            pull = self.service.open_pull(response_id)
        except PickerError as error:
            raise rpc_error(error) from None
        completed = False
        try:
            for piece in pull.messages():
                yield piece
            completed = True
        finally:
            self.service.close_pull(pull, completed=completed)

    def reports(self, response_id: int) -> LocalReports:
        return LocalReports(self.service, response_id)

    async def serving(self) -> bool:
        return self._serving()

    def model_names(self) -> tuple[str, ...] | None:
        return self._model_names()

    async def aclose(self) -> None:
        return None

"""An asyncio client for callers of the picker: one channel, the whole per-request flow.

async with PickerClient("127.0.0.1:9002") as picker:
    pushed = await picker.push(chunks, declared_length=len(body))
    pick = await picker.pick(pushed.stream_id, tenant="team-a")
    async for chunk in picker.pull(pick.response_id): ...
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Sequence
from types import TracebackType
from typing import Any

import grpc

from kinference.api import extensions
from kinference.api.extensions import REQUEST_PATH, PickExtras, read_pick_metadata
from kinference.bodies import MAX_CHUNK_BYTES
from kinference.v1 import picker_pb2 as pb
from kinference.v1 import picker_pb2_grpc as pb_grpc

DECLARED_LENGTH = "kinference-declared-length"
CLIENT_REQUEST_ID = "kinference-client-request-id"


def split_chunks(body: bytes, size: int = MAX_CHUNK_BYTES) -> list[bytes]:
    """A body cut into chunks of at most `size` bytes (the spec's limit is 1 MiB)."""
    return [body[i : i + size] for i in range(0, len(body), size)] or [b""]


class PickerClient:
    """Every call for one request must go to the same instance: keep one client per target."""

    def __init__(
        self, target: str, *, options: Sequence[tuple[str, Any]] = (), channel: Any = None
    ) -> None:
        self.channel: grpc.aio.Channel = channel or grpc.aio.insecure_channel(
            target, options=list(options)
        )
        self.stub = pb_grpc.PickerStub(self.channel)

    async def __aenter__(self) -> PickerClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self.channel.close(None)

    async def push(
        self,
        chunks: Iterable[bytes] | AsyncIterable[bytes],
        *,
        declared_length: int | None = None,
        client_request_id: str = "",
        request_path: str = "",
    ) -> pb.PushBodyResponse:
        """Stream a body in; completes with a clean half-close after the last chunk.

        `request_path` is the client's path (`/v1/responses`, ...), sent as the
        `kinference-request-path` extension so Pick tells the API shape from it."""
        metadata = _push_metadata(declared_length, client_request_id, request_path)
        response: pb.PushBodyResponse = await self.stub.PushBody(
            _messages(chunks), metadata=metadata
        )
        return response

    async def push_and_pick(
        self,
        chunks: Iterable[bytes] | AsyncIterable[bytes],
        pick: pb.PickRequest,
        *,
        declared_length: int | None = None,
        client_request_id: str = "",
        request_path: str = "",
        inline_body_max: int = 0,
    ) -> tuple[pb.PushBodyResponse, tuple[pb.PickResponse, PickExtras] | None]:
        """`push`, asking the picker to pick at the half-close (`kinference-pick-bin`) and to
        send a dispatched body of at most `inline_body_max` bytes inline. The pick is None
        when the picker does not know the extension: then call `pick_with_extras`."""
        metadata = _push_metadata(declared_length, client_request_id, request_path)
        metadata.append((extensions.PICK, pick.SerializeToString()))
        if inline_body_max:
            metadata.append((extensions.INLINE_BODY_MAX, str(inline_body_max)))
        call = self.stub.PushBody(None, metadata=metadata)  # None: written below
        await _written(call, chunks)
        response: pb.PushBodyResponse = await call
        trailing = await call.trailing_metadata()
        for key, value in trailing or ():
            if key == extensions.PICK and isinstance(value, bytes):
                picked = pb.PickResponse.FromString(value)
                return response, (picked, read_pick_metadata(trailing))
        return response, None

    async def pick(
        self,
        stream_id: int,
        *,
        tenant: str = "",
        qos: pb.PickRequest.QosClass.ValueType = pb.PickRequest.INTERACTIVE,
        pool: tuple[str, str] | None = None,
        client_request_id: str = "",
    ) -> pb.PickResponse:
        request = pick_request(stream_id, tenant, qos, pool, client_request_id)
        response: pb.PickResponse = await self.stub.Pick(request)
        return response

    async def pick_with_extras(
        self,
        stream_id: int,
        *,
        tenant: str = "",
        qos: pb.PickRequest.QosClass.ValueType = pb.PickRequest.INTERACTIVE,
        pool: tuple[str, str] | None = None,
        client_request_id: str = "",
        inline_body_max: int = 0,
    ) -> tuple[pb.PickResponse, PickExtras]:
        """Pick, and the extensions its trailing metadata carries (reason code, Retry-After,
        translation, the body when `inline_body_max` asks for it; see
        `kinference.api.extensions`)."""
        request = pick_request(stream_id, tenant, qos, pool, client_request_id)
        metadata = [(extensions.INLINE_BODY_MAX, str(inline_body_max))] if inline_body_max else None
        call = self.stub.Pick(request, metadata=metadata)
        response: pb.PickResponse = await call
        return response, read_pick_metadata(await call.trailing_metadata())

    async def pull(self, response_id: int) -> AsyncIterator[bytes]:
        """The (possibly rewritten) body, chunk by chunk; consume at the upstream's pace."""
        call = self.stub.PullBody(pb.PullBodyRequest(response_id=response_id))
        async for message in call:
            yield message.chunk

    async def pull_all(self, response_id: int) -> bytes:
        return b"".join([chunk async for chunk in self.pull(response_id)])

    async def first_token(
        self, response_id: int, ttft_ms: int, upstream_status: int = 200
    ) -> pb.ReportFirstTokenResponse:
        request = pb.ReportFirstTokenRequest(
            response_id=response_id, observed_ttft_ms=ttft_ms, upstream_status=upstream_status
        )
        response: pb.ReportFirstTokenResponse = await self.stub.ReportFirstToken(request)
        return response

    async def final_token(
        self,
        response_id: int,
        *,
        model: str = "",
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        cached_tokens: int | None = None,
        itl_bucket_counts: Sequence[int] = (),
        first_token: tuple[int, int, int] | None = None,
    ) -> pb.ReportFinalTokenResponse:
        """ReportFinalToken; `first_token` (ttft ms, upstream status, ms since the first
        token came) folds the request's ReportFirstToken into it (`kinference-first-token`:
        only for a picker that answered a `push_and_pick` with its pick)."""
        request = pb.ReportFinalTokenRequest(
            response_id=response_id,
            model=model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            itl_bucket_counts=list(itl_bucket_counts),
            itl_bucket_layout=1 if itl_bucket_counts else 0,
        )
        if cached_tokens is not None:
            request.cached_tokens = cached_tokens
        metadata = None
        if first_token is not None:
            metadata = [(extensions.FIRST_TOKEN, ":".join(map(str, first_token)))]
        response: pb.ReportFinalTokenResponse = await self.stub.ReportFinalToken(
            request, metadata=metadata
        )
        return response

    async def abort(
        self,
        response_id: int,
        reason: pb.AbortRequest.Reason.ValueType = pb.AbortRequest.NOT_DISPATCHED,
        detail: str = "",
    ) -> pb.AbortResponse:
        request = pb.AbortRequest(response_id=response_id, reason=reason, detail=detail)
        response: pb.AbortResponse = await self.stub.Abort(request)
        return response


def _push_metadata(
    declared_length: int | None, client_request_id: str, request_path: str
) -> list[tuple[str, str | bytes]]:
    metadata: list[tuple[str, str | bytes]] = []
    if declared_length is not None:
        metadata.append((DECLARED_LENGTH, str(declared_length)))
    if client_request_id:
        metadata.append((CLIENT_REQUEST_ID, client_request_id))
    if request_path:
        metadata.append((REQUEST_PATH, request_path))
    return metadata


def pick_request(
    stream_id: int,
    tenant: str,
    qos: pb.PickRequest.QosClass.ValueType,
    pool: tuple[str, str] | None,
    client_request_id: str,
) -> pb.PickRequest:
    request = pb.PickRequest(
        body_stream_id=stream_id, tenant=tenant, qos_class=qos, client_request_id=client_request_id
    )
    if pool is not None:
        request.inference_pool.namespace, request.inference_pool.name = pool
    return request


async def _written(
    call: grpc.aio.StreamUnaryCall[pb.BodyChunk, pb.PushBodyResponse],
    chunks: Iterable[bytes] | AsyncIterable[bytes],
) -> None:
    """Write `chunks` on the call, then half-close; a failing source resets the stream.

    Writing on the call spares grpc.aio the task that consumes a request iterator (about a
    tenth of a millisecond of CPU per call)."""
    try:
        async for message in _messages(chunks):
            await call.write(message)
        await call.done_writing()
    except BaseException:
        call.cancel()
        raise


async def _messages(
    chunks: Iterable[bytes] | AsyncIterable[bytes],
) -> AsyncIterator[pb.BodyChunk]:
    if isinstance(chunks, AsyncIterable):
        async for chunk in chunks:
            yield pb.BodyChunk(chunk=chunk)
    else:
        for chunk in chunks:
            yield pb.BodyChunk(chunk=chunk)

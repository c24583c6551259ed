"""Client side of the picker benchmark: request bodies and the per-request call sequence.

Everything here speaks to a server through one ``PickerStub`` on one aio channel, the way
a gateway would: PushBody, Pick, PullBody, then the two token reports.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc

from kinference.api import extensions
from kinference.v1 import picker_pb2, picker_pb2_grpc

CHUNK_BYTES = 1 << 20
MODEL = "bench-model"
ACCEPTED_OUTCOMES = frozenset({picker_pb2.PickResponse.OK, picker_pb2.PickResponse.DEGRADED})
ITL_BUCKETS_LAYOUT_1 = [3, 40, 30, 10, 5, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0]
CLIENT_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_send_message_length", CHUNK_BYTES + 4096),
]
_PADDING = "The quick brown fox jumps over the lazy dog while the router picks a worker. "
_BASE64ISH = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


class FlowError(RuntimeError):
    """The server answered, but not what the contract promises."""


@dataclass(frozen=True)
class Body:
    """A request body pre-split into wire chunks, built once and reused for every request."""

    chunks: tuple[bytes, ...]
    length: int

    def messages(self) -> Iterator[picker_pb2.BodyChunk]:
        return (picker_pb2.BodyChunk(chunk=chunk) for chunk in self.chunks)


def chat_body(size: int, alphabet: str = _PADDING, chunk_bytes: int = CHUNK_BYTES) -> Body:
    """An OpenAI chat request for MODEL whose JSON encoding is exactly ``size`` bytes."""
    skeleton = {"model": MODEL, "messages": [{"role": "user", "content": ""}]}
    overhead = len(json.dumps(skeleton, separators=(",", ":")).encode())
    if size < overhead:
        raise ValueError(f"a chat body needs at least {overhead} bytes")
    pad = size - overhead
    content = (alphabet * (pad // len(alphabet) + 1))[:pad]
    skeleton["messages"][0]["content"] = content  # type: ignore[index]
    raw = json.dumps(skeleton, separators=(",", ":")).encode()
    assert len(raw) == size, (len(raw), size)
    chunks = tuple(raw[i : i + chunk_bytes] for i in range(0, size, chunk_bytes))
    return Body(chunks=chunks, length=size)


def big_chat_body(size: int) -> Body:
    """A chat body whose content is one huge base64-looking string."""
    return chat_body(size, alphabet=_BASE64ISH)


@dataclass
class FlowClient:
    """The call sequence of one request, over a shared stub."""

    stub: picker_pb2_grpc.PickerAsyncStub
    request_ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def _push_metadata(self, body: Body) -> tuple[tuple[str, str], ...]:
        """What every push of the bench declares: the body's length, a request id."""
        return (
            ("kinference-declared-length", str(body.length)),
            ("kinference-client-request-id", f"bench-{next(self.request_ids)}"),
        )

    async def push(self, body: Body) -> int:
        metadata = self._push_metadata(body)
        reply = await self.stub.PushBody(body.messages(), metadata=metadata)
        if reply.stream_id == 0 or reply.total_bytes != body.length:
            raise FlowError(f"PushBody answered {reply}")
        return int(reply.stream_id)

    async def pick(self, stream_id: int) -> picker_pb2.PickResponse:
        reply: picker_pb2.PickResponse = await self.stub.Pick(
            picker_pb2.PickRequest(body_stream_id=stream_id, tenant="")
        )
        return _accepted(reply, "Pick")

    async def pull(self, picked: picker_pb2.PickResponse) -> int:
        received = 0
        call = self.stub.PullBody(picker_pb2.PullBodyRequest(response_id=picked.response_id))
        async for message in call:
            received += len(message.chunk)
        if received != picked.body_total_bytes:
            raise FlowError(f"PullBody sent {received} bytes, Pick said {picked.body_total_bytes}")
        return received

    async def report(self, picked: picker_pb2.PickResponse) -> None:
        first = await self.stub.ReportFirstToken(
            picker_pb2.ReportFirstTokenRequest(response_id=picked.response_id, observed_ttft_ms=5)
        )
        final = await self.stub.ReportFinalToken(final_report(picked.response_id))
        if not (first.acknowledged and final.acknowledged):
            raise FlowError("a token report was not acknowledged")

    async def full_flow(self, body: Body) -> None:
        picked = await self.pick(await self.push(body))
        await self.pull(picked)
        await self.report(picked)

    async def two_call_flow(self, body: Body) -> None:
        """The same request in two calls, with kinference's extensions (README): PushBody
        picks at its half-close and answers with the body inline, and the final report
        carries the first token's."""
        metadata = (
            *self._push_metadata(body),
            (extensions.PICK, picker_pb2.PickRequest(tenant="").SerializeToString()),
            (extensions.INLINE_BODY_MAX, str(extensions.INLINE_BODY_LIMIT)),
        )
        call = self.stub.PushBody(body.messages(), metadata=metadata)
        await call
        trailing = dict(await call.trailing_metadata() or ())
        picked = picker_pb2.PickResponse.FromString(trailing[extensions.PICK])
        _accepted(picked, "the pick on push")
        if len(trailing.get(extensions.BODY, b"")) != picked.body_total_bytes:
            raise FlowError("the body did not come back inline")
        final = await self.stub.ReportFinalToken(
            final_report(picked.response_id), metadata=((extensions.FIRST_TOKEN, "5:200"),)
        )
        if not final.acknowledged:
            raise FlowError("the final report was not acknowledged")


def _accepted(reply: picker_pb2.PickResponse, what: str) -> picker_pb2.PickResponse:
    """`reply`, if it is a pick the flow can go on with."""
    if reply.outcome not in ACCEPTED_OUTCOMES or reply.response_id == 0:
        outcome = picker_pb2.PickResponse.Outcome.Name(reply.outcome)
        raise FlowError(f"{what} answered {outcome}: {reply.reason!r}")
    return reply


def final_report(response_id: int) -> picker_pb2.ReportFinalTokenRequest:
    return picker_pb2.ReportFinalTokenRequest(
        response_id=response_id,
        model=MODEL,
        prompt_tokens=1000,
        completion_tokens=10,
        itl_bucket_counts=ITL_BUCKETS_LAYOUT_1,
        itl_bucket_layout=1,
    )


@dataclass(frozen=True)
class RoundTrip:
    total_s: float
    pick_s: float
    pulled_bytes: int


async def body_round_trip(client: FlowClient, body: Body) -> RoundTrip:
    """Push, Pick, and pull one (large) body; the pull only counts bytes."""
    start = time.perf_counter()
    stream_id = await client.push(body)
    pick_start = time.perf_counter()
    picked = await client.pick(stream_id)
    pick_s = time.perf_counter() - pick_start
    pulled = await client.pull(picked)
    return RoundTrip(total_s=time.perf_counter() - start, pick_s=pick_s, pulled_bytes=pulled)


@dataclass
class _Progress:
    completed: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)


async def _flow_worker(
    client: FlowClient, body: Body, progress: _Progress, two_calls: bool
) -> None:
    flow = client.two_call_flow if two_calls else client.full_flow
    while not progress.stop.is_set():
        await flow(body)
        progress.completed += 1


@dataclass(frozen=True)
class RateWindow:
    flows: int  # completed inside the measured window
    seconds: float  # length of the measured window
    total_flows: int  # completed over the whole round: warm-up, window and drain

    @property
    def rate(self) -> float:
        return self.flows / self.seconds


async def flow_rate(
    client: FlowClient,
    body: Body,
    workers: int,
    warmup_s: float,
    measure_s: float,
    *,
    two_calls: bool = False,
) -> RateWindow:
    """Run ``workers`` looping flows (``two_calls``: `FlowClient.two_call_flow`); count
    completions in a window after the warm-up.

    Workers finish the flow they are in before stopping, so the server is left clean.
    The first worker failure aborts the round and propagates.
    """
    progress = _Progress()
    tasks = [
        asyncio.create_task(_flow_worker(client, body, progress, two_calls)) for _ in range(workers)
    ]
    try:
        done, _ = await asyncio.wait(tasks, timeout=warmup_s, return_when=asyncio.FIRST_EXCEPTION)
        _raise_first(done)
        start_count, start = progress.completed, time.perf_counter()
        done, _ = await asyncio.wait(tasks, timeout=measure_s, return_when=asyncio.FIRST_EXCEPTION)
        _raise_first(done)
        window_flows, window_s = progress.completed - start_count, time.perf_counter() - start
        progress.stop.set()
        _raise_first(set(await asyncio.wait_for(_gather_done(tasks), timeout=30)))
        return RateWindow(window_flows, window_s, progress.completed)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _gather_done(tasks: list[asyncio.Task[None]]) -> list[asyncio.Task[None]]:
    await asyncio.wait(tasks)
    return tasks


def _raise_first(done: set[asyncio.Task[None]]) -> None:
    for task in done:
        if not task.cancelled() and (error := task.exception()) is not None:
            raise error


def open_channel(address: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(address, options=CLIENT_OPTIONS)

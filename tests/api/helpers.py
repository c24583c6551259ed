"""Helpers for the conformance suite: bodies, bounded waits, and pushes that stay open.

Every wait here polls a condition against a deadline; nothing sleeps a fixed time to let a
state settle.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from kinference.client import CLIENT_REQUEST_ID, DECLARED_LENGTH, PickerClient
from kinference.v1 import picker_pb2 as pb
from kinference.v1 import picker_pb2_grpc as pb_grpc
from tests.conftest import MODEL, RunningPicker

KiB = 1024
MiB = 1024 * KiB

# Upper bound for any state the server reaches on its own (TTL reclaim, a reset noticed).
SETTLE_S = 10.0
# How long a held-open PushBody waits for the server to end the call before half-closing.
HOLD_S = 10.0
_POLL_S = 0.005

ENDPOINTS_CHAT = frozenset({"10.0.0.5:8000", "10.0.0.6:8000"})
ENDPOINT_BIG = "10.0.1.5:8000"
ALL_ENDPOINTS = ENDPOINTS_CHAT | {ENDPOINT_BIG}
POOL_CHAT = ("default", "chat")
POOL_BIG = ("team-b", "big")

Code = grpc.StatusCode


# --- bodies -------------------------------------------------------------------------------


def chat_body(model: Any = MODEL, content: str = "hello", **extra: Any) -> bytes:
    """An OpenAI chat-completions request body."""
    request: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
    }
    request.update(extra)
    return json.dumps(request).encode()


def sized_chat_body(size: int, model: str = MODEL, tag: str = "") -> bytes:
    """A chat body of exactly `size` bytes (padding the message content)."""
    empty = chat_body(model, tag)
    pad = size - len(empty)
    assert pad >= 0, f"{size} bytes is too small for a chat body"
    body = chat_body(model, tag + "x" * pad)
    assert len(body) == size
    return body


def chunked(body: bytes, size: int) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)] or [b""]


@dataclass
class StreamedBody:
    """A large chat body produced chunk by chunk, so the client never holds all of it."""

    total_chunks: int
    chunk_bytes: int = MiB
    model: str = MODEL
    sha256: str = ""
    size: int = 0

    def chunks(self) -> Iterator[bytes]:
        """Yields the body; afterwards `size` and `sha256` describe what was yielded."""
        digest = hashlib.sha256()
        size = 0
        for piece in self._pieces():
            digest.update(piece)
            size += len(piece)
            yield piece
        self.size, self.sha256 = size, digest.hexdigest()

    def _pieces(self) -> Iterator[bytes]:
        yield b'{"model": ' + json.dumps(self.model).encode() + b', "messages": [{"role": '
        yield b'"user", "content": "'
        for i in range(self.total_chunks):
            # Distinct content per chunk, so a reordered or repeated chunk changes the hash.
            yield (b"%08d" % i) * (self.chunk_bytes // 8)
        yield b'"}]}'


# --- waiting ------------------------------------------------------------------------------


async def until(predicate: Callable[[], bool], within_s: float) -> bool:
    """Poll `predicate` until it holds or `within_s` seconds pass; returns whether it held."""
    deadline = time.monotonic() + within_s
    while not predicate():
        if time.monotonic() >= deadline:
            return predicate()
        await asyncio.sleep(_POLL_S)
    return True


async def wait_until(
    predicate: Callable[[], bool], within_s: float = SETTLE_S, what: str = ""
) -> None:
    """Like `until`, but fails the test when the condition never holds."""
    if not await until(predicate, within_s):
        pytest.fail(f"timed out after {within_s:g} s waiting for {what or predicate}")


def nothing_held(picker: RunningPicker) -> bool:
    """No body bytes, no held body, no upload under way and no request in flight."""
    app = picker.app
    return (
        app.store.budget.used == 0
        and app.store.held_bodies == 0
        and app.store.idle
        and len(app.inflight) == 0
        and not app.inflight.per_endpoint()
    )


async def wait_nothing_held(picker: RunningPicker, within_s: float = SETTLE_S) -> None:
    app = picker.app

    def describe() -> str:
        return (
            f"nothing held (budget.used={app.store.budget.used}, "
            f"held_bodies={app.store.held_bodies}, idle={app.store.idle}, "
            f"inflight={len(app.inflight)})"
        )

    if not await until(lambda: nothing_held(picker), within_s):
        pytest.fail(f"timed out after {within_s:g} s waiting for {describe()}")


def bodies_held(picker: RunningPicker) -> bool:
    """Body store empty: no bytes reserved, no body held, no upload under way."""
    store = picker.app.store
    return store.budget.used == 0 and store.held_bodies == 0 and store.idle


# --- calls --------------------------------------------------------------------------------


def push_metadata(declared: int | str | None = None, request_id: str = "") -> list[tuple[str, str]]:
    metadata: list[tuple[str, str]] = []
    if declared is not None:
        metadata.append((DECLARED_LENGTH, str(declared)))
    if request_id:
        metadata.append((CLIENT_REQUEST_ID, request_id))
    return metadata


async def push(
    picker: RunningPicker, body: bytes, chunk_size: int = 64 * KiB, declared: bool = True
) -> pb.PushBodyResponse:
    """Push a body in chunks with its declared length; a clean half-close at the end."""
    return await picker.client.push(
        chunked(body, chunk_size), declared_length=len(body) if declared else None
    )


async def push_and_pick(
    picker: RunningPicker, body: bytes, pool: tuple[str, str] | None = None
) -> pb.PickResponse:
    pushed = await push(picker, body)
    return await picker.client.pick(pushed.stream_id, pool=pool)


async def pick_ok(
    picker: RunningPicker, body: bytes | None = None, pool: tuple[str, str] | None = None
) -> pb.PickResponse:
    pick = await push_and_pick(picker, body or chat_body(), pool)
    assert pick.outcome == pb.PickResponse.OK, pick
    assert pick.response_id != 0
    return pick


async def first_token_after(
    picker: RunningPicker, response_id: int, ttft_ms: int, upstream_status: int = 200
) -> pb.ReportFirstTokenResponse:
    """ReportFirstToken of a first token `ttft_ms` after the Pick, the Pick dated back as
    far: the server learns no TTFT longer than the time since the Pick (`Reports`)."""
    assignment = picker.app.inflight.get(response_id)
    if assignment is not None:
        assignment.picked_at -= ttft_ms / 1000.0
    return await picker.client.first_token(response_id, ttft_ms, upstream_status)


async def status_of(awaitable: Any) -> grpc.aio.AioRpcError:
    """The gRPC error an awaitable call fails with (fails the test when it succeeds)."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await awaitable
    return info.value


async def pull_status(picker: RunningPicker, response_id: int) -> grpc.aio.AioRpcError:
    """The error a PullBody fails with (fails the test when it streams successfully)."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await picker.client.pull_all(response_id)
    return info.value


# What grpc.aio reports when the server ended a call the client was still writing to
# (grpc/grpc#36066): the server's status is lost in transport.
CORE_TRANSPORT_LOST = "Internal error from Core"


def push_errors_sent(picker: RunningPicker) -> dict[str, float]:
    """The server's own count of the PushBody statuses it failed calls with, by code."""
    counts: dict[str, float] = {}
    for family in picker.app.metrics.registry.collect():
        for sample in family.samples:
            if sample.name == "kinference_rpc_errors_total" and (
                sample.labels.get("method") == "PushBody"
            ):
                counts[sample.labels["code"]] = sample.value
    return counts


def status_sent_since(picker: RunningPicker, before: dict[str, float]) -> grpc.StatusCode:
    """The one PushBody error status the server sent since `before` (INTERNAL if none)."""
    after = push_errors_sent(picker)
    sent = [code for code, count in after.items() if count > before.get(code, 0.0)]
    return grpc.StatusCode[sent[0]] if len(sent) == 1 else grpc.StatusCode.INTERNAL


def assert_code(error: grpc.aio.AioRpcError, code: grpc.StatusCode) -> None:
    assert error.code() == code, f"expected {code.name}, got {error.code().name}: {error.details()}"


@dataclass
class HeldPush:
    """A PushBody whose request stream stays open after its chunks.

    The stream is half-closed only once the call has ended (or after `HOLD_S`, so a server
    that wrongly waits for more still gets a clean half-close and the test fails on the
    result). This keeps the client from writing while the server fails the call, which on
    grpc.aio can surface INTERNAL instead of the server's status (grpc/grpc#36066).
    """

    call: Any
    finished: asyncio.Event = field(default_factory=asyncio.Event)

    async def error(self) -> grpc.aio.AioRpcError:
        try:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await self.call
        finally:
            await asyncio.wait_for(self.finished.wait(), HOLD_S + SETTLE_S)
        return info.value

    async def reset(self) -> None:
        """Cancel the call (RST_STREAM), as a caller whose own client went away would."""
        self.call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.call
        # No wait on `finished`: a cancelled request iterator may never resume to set it.


def held_push(
    picker: RunningPicker,
    chunks: Sequence[bytes],
    metadata: Sequence[tuple[str, str]] = (),
    *,
    release: asyncio.Event | None = None,
    gap_s: float = 0.0,
    client: PickerClient | None = None,
) -> HeldPush:
    """Start a PushBody that writes `chunks` and then holds its request stream open.

    With `release`, the stream half-closes when that event is set (or the call ends);
    without it, only when the call ends. `client` picks another connection to the picker.
    """
    stub = pb_grpc.PickerStub((client or picker.client).channel)
    holder: list[HeldPush] = []

    def ended() -> bool:
        return holder[0].call.done() or (release is not None and release.is_set())

    async def requests() -> AsyncIterator[pb.BodyChunk]:
        try:
            for i, chunk in enumerate(chunks):
                if i and gap_s:
                    await asyncio.sleep(gap_s)  # pacing of the upload, not a wait for state
                yield pb.BodyChunk(chunk=chunk)
            await until(ended, HOLD_S)
        finally:
            holder[0].finished.set()

    holder.append(HeldPush(stub.PushBody(requests(), metadata=list(metadata))))
    return holder[0]


async def push_error(
    picker: RunningPicker,
    chunks: Sequence[bytes],
    metadata: Sequence[tuple[str, str]] = (),
) -> grpc.aio.AioRpcError:
    """Push `chunks`, hold the stream open, and return the status the server fails it with."""
    return await held_push(picker, chunks, metadata).error()


def rss_bytes() -> int:
    """Resident set size of this process (server and client share it)."""
    with open("/proc/self/statm") as statm:
        resident_pages = int(statm.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")

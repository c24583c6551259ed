"""Shared by the PickerSession tests: bodies, start frames and a stream on a picker."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import grpc
import pytest

from kinference.client import pick_request
from kinference.session_client import SessionClient
from kinference.v1 import picker_pb2 as pb
from kinference.v1 import session_pb2 as spb
from tests.api.helpers import nothing_held, wait_until
from tests.conftest import MODEL, RunningPicker

STREAMED = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
NOT_STREAMED = {**STREAMED, "stream": False}


def body_of(content: str = "hi", **fields: object) -> bytes:
    return json.dumps({**NOT_STREAMED, "messages": [{"role": "user", "content": content}],
                       **fields}).encode()  # fmt: skip


def start(body: bytes | None, *, tenant: str = "", inline: int = 1 << 20) -> spb.Start:
    request = pick_request(0, tenant, pb.PickRequest.INTERACTIVE, None, "req")
    declared = len(body) if body is not None else None
    return spb.Start(declared_length=declared, pick=request, inline_body_max=inline)


async def chunks_of(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def opened(
    picker: RunningPicker, unsent: list[spb.ClientFrame] | None = None
) -> SessionClient:
    sink: list[spb.ClientFrame] = [] if unsent is None else unsent
    session = await SessionClient.open(picker.client.channel, sink.extend)
    assert session is not None
    return session


async def released(picker: RunningPicker) -> None:
    """Wait until the picker holds no body, upload or request in flight."""
    await wait_until(lambda: nothing_held(picker), what="nothing held")


def uploads(picker: RunningPicker) -> int:
    return picker.app.store._uploads


async def expect_error(
    session: SessionClient, body: AsyncIterator[bytes], begin: spb.Start
) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await session.push_and_pick(body, begin)
    return failed.value


def error_code(error: grpc.aio.AioRpcError) -> str:
    return dict(error.trailing_metadata() or ()).get("kinference-error-code", "")  # type: ignore[arg-type]

"""A body that arrived whole with its head goes into PushBody as a list (no stream to wait
on); one still arriving streams in as before. Both end alike for the client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable

import pytest

from kinference.bodies import MAX_CHUNK_BYTES
from kinference.gateway.upload import BodyTooLarge, Upload
from tests.api.helpers import nothing_held, wait_until
from tests.conftest import MODEL, PickerFactory
from tests.gateway.conftest import GatewayFactory, Stack, dead_pool_stack
from tests.gateway.test_upload import arriving

LIMIT = 1000  # the gateway's body limit in the over-the-limit test


def test_a_whole_body_is_cut_to_1_mib_as_a_stream_would_be() -> None:
    upload = Upload(arriving(), limit=10 * MAX_CHUNK_BYTES)
    chunks = upload.whole(b"x" * (2 * MAX_CHUNK_BYTES + 3))
    assert [len(chunk) for chunk in chunks] == [MAX_CHUNK_BYTES, MAX_CHUNK_BYTES, 3]
    assert Upload(arriving(), limit=10).whole(b"") == []
    assert Upload(arriving(), limit=10).whole(b"0123456789") == [b"0123456789"]


def test_a_whole_body_over_the_limit_is_refused_and_its_usage_ask_read() -> None:
    upload = Upload(arriving(), limit=10)
    with pytest.raises(BodyTooLarge):
        upload.whole(b"x" * 11)
    assert upload.too_large and upload.error().status == 413
    asking = Upload(arriving(), limit=1000)
    asking.whole(b'{"stream_options": {"include_usage": true}}')
    assert asking.usage_ask.asked()


async def _exchange(
    port: int, head: bytes, *pieces: bytes, wait: Awaitable[None] | None = None
) -> bytes:
    """Send `head` and `pieces` on one connection (`wait`, an awaitable, between the first
    piece and the rest); the whole answer (the gateway closes: `connection: close`)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head + pieces[0])
        await writer.drain()
        if wait is not None:
            await wait
        for piece in pieces[1:]:
            writer.write(piece)
            await writer.drain()
        async with asyncio.timeout(20):
            return await reader.read()
    finally:
        writer.close()


async def test_a_body_still_arriving_after_its_head_streams_in(stack: Stack) -> None:
    """The first body message is not all of it: the push streams, that message first."""
    body = json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "y" * 3000}], "max_tokens": 3}
    ).encode()
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\n"
        b"content-type: application/json\r\nconnection: close\r\n"
        b"content-length: %d\r\n\r\n" % len(body)
    )
    store = stack.picker.app.store
    streaming = wait_until(lambda: store.budget.used > 0, what="the push to be streaming")
    data = await _exchange(stack.gateway.port, head, body[:1000], body[1000:], wait=streaming)
    status, _, payload = data.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 200"), data[:300]
    assert json.loads(payload)["usage"]["completion_tokens"] == 3
    await wait_until(lambda: nothing_held(stack.picker), what="everything released")


@pytest.mark.parametrize("mode", ["remote", "in-process"])
async def test_a_whole_chunked_body_over_the_limit_is_413_and_nothing_held(
    mode: str, start_picker: PickerFactory, start_gateway: GatewayFactory
) -> None:
    """No declared length to refuse at once: the body, all in one write, is measured."""
    picker, gateway = await dead_pool_stack(mode, start_picker, start_gateway, max_body_bytes=LIMIT)
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "z" * LIMIT}]})
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\n"
        b"content-type: application/json\r\ntransfer-encoding: chunked\r\n"
        b"connection: close\r\n\r\n"
    )
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body.encode())
    data = await _exchange(gateway.port, head, chunked)
    status, _, payload = data.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 413"), data[:300]
    assert json.loads(payload)["error"]["code"] == "request_too_large"
    await wait_until(lambda: nothing_held(picker), what="nothing held")

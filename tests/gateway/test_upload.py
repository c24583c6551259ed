"""The PushBody request stream: 1 MiB chunks at most, and the gateway's size and time
limits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from kinference.bodies import MAX_CHUNK_BYTES
from kinference.gateway.errors import GatewayError
from kinference.gateway.upload import BodyTooLarge, BodyTooSlow, Upload
from tests.api.helpers import nothing_held, wait_until
from tests.conftest import MODEL, PickerFactory
from tests.gateway.conftest import GatewayFactory, dead_pool_stack

TOTAL_S = 0.3  # the gateway's body total timeout in the trickle test
GAP_S = 0.1  # between the trickled pieces: far below the picker's idle timeout


async def arriving(*sizes: int) -> AsyncIterator[bytes]:
    for size in sizes:
        yield b"x" * size


async def test_chunks_are_cut_to_1_mib_in_order() -> None:
    upload = Upload(arriving(10, 3 * MAX_CHUNK_BYTES + 5, 0, 7), limit=10 * MAX_CHUNK_BYTES)
    chunks = [chunk async for chunk in upload.chunks()]
    assert [len(chunk) for chunk in chunks] == [10, *[MAX_CHUNK_BYTES] * 3, 5, 7]
    assert not upload.too_large


async def test_over_the_limit_stops_the_stream() -> None:
    upload = Upload(arriving(60, 50), limit=100)
    received = []
    with pytest.raises(BodyTooLarge):
        async for chunk in upload.chunks():
            received.append(chunk)
    assert [len(chunk) for chunk in received] == [60]  # nothing past the limit is pushed
    assert upload.too_large and upload.cut_short()
    assert upload.error().status == 413


def test_declared_length_over_the_limit_is_refused_at_once() -> None:
    upload = Upload(arriving(), limit=100)
    upload.check_declared(100)
    upload.check_declared(None)
    with pytest.raises(GatewayError) as raised:
        upload.check_declared(101)
    assert (raised.value.status, raised.value.code) == (413, "request_too_large")


async def test_a_body_past_its_time_limit_stops_the_stream_with_408() -> None:
    upload = Upload(arriving(60, 50), limit=1000, time_limit_s=-1.0)  # already past
    with pytest.raises(BodyTooSlow):
        async for _chunk in upload.chunks():
            pass
    assert upload.too_slow and upload.cut and upload.cut_short()
    assert (upload.error().status, upload.error().code) == (408, "request_timeout")


@pytest.mark.parametrize("mode", ["remote", "in-process"])
async def test_a_body_trickled_past_the_total_timeout_is_408_and_discarded(
    mode: str, start_picker: PickerFactory, start_gateway: GatewayFactory
) -> None:
    """Each piece well within the picker's idle timeout (30 s), the whole past the gateway's
    total (before: the body was taken however long it took: a byte every 29 s held the
    connection and the picker's bytes for ever)."""
    picker, gateway = await dead_pool_stack(
        mode, start_picker, start_gateway, body_total_timeout_s=TOTAL_S
    )
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * 200}]})
    pieces = [body[start : start + 8].encode() for start in range(0, len(body), 8)]
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\n"
        b"content-type: application/json\r\ntransfer-encoding: chunked\r\n"
        b"connection: close\r\n\r\n"
    )
    answer = asyncio.ensure_future(reader.read())
    for piece in pieces:  # ~3 s of trickle, 10x the total timeout
        if answer.done():
            break
        try:
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        except ConnectionError:
            break
        await asyncio.sleep(GAP_S)
    else:
        writer.write(b"0\r\n\r\n")  # the whole body: what the gateway before answered
    async with asyncio.timeout(10):
        data = await answer
    writer.close()
    head, _, payload = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), data[:200]
    assert json.loads(payload)["error"]["code"] == "request_timeout"
    await wait_until(lambda: nothing_held(picker), what="the partial push discarded")

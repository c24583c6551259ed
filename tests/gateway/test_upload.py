"""The PushBody request stream: 1 MiB chunks at most, and the gateway's size limit."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from kinference.bodies import MAX_CHUNK_BYTES
from kinference.gateway.errors import GatewayError
from kinference.gateway.upload import BodyTooLarge, Upload


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

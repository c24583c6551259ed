"""An upstream that compresses its response although asked for `identity`: the body is
decoded as it comes (gzip, deflate), in bounded pieces; any other coding fails the request."""

from __future__ import annotations

import asyncio
import gzip
import zlib

import pytest

from kinference.gateway.decoded import PIECE
from kinference.gateway.http1 import Broken, HttpClient
from kinference.gateway.relay import Relay
from kinference.gateway.timing import TokenClock
from tests.gateway.counting_upstream import Upstream, body, read_request

PLAIN = b'{"id": "c1", "choices": [{"message": {"content": "' + b"hi " * 5000 + b'"}}]}'
CODED = {"gzip": gzip.compress(PLAIN), "deflate": zlib.compress(PLAIN)}


def compressing(coding: str, data: bytes) -> Upstream:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"content-encoding: %s\r\ncontent-length: %d\r\n\r\n" % (coding.encode(), len(data))
        )
        for start in range(0, len(data), 1000):  # in many reads
            writer.write(data[start : start + 1000])
            await writer.drain()

    return Upstream(answer)


class _Reports:
    def first_token(self, ttft_ms: int, upstream_status: int) -> None:
        pass

    def final(self, usage: object, clock: object, fallback_model: str) -> None:
        pass

    def abort(self, reason: int, detail: str) -> None:
        pass


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
async def test_a_compressed_body_is_relayed_decoded(coding: str) -> None:
    """Before: the gzip bytes went to the client without their content-encoding."""
    async with compressing(coding, CODED[coding]) as upstream:
        http = HttpClient(connect_timeout_s=2.0, read_timeout_s=10.0)
        try:
            response = await http.request("POST", upstream.url, [("content-length", "0")], body())
            relay = Relay(response, TokenClock(), _Reports(), fallback_model="m",
                          max_whole_bytes=1 << 20)  # fmt: skip
            names = [name for name, _ in relay.headers]
            assert "content-encoding" not in names and "content-length" not in names
            assert b"".join([chunk async for chunk in relay.body()]) == PLAIN
            response.close()
        finally:
            await http.aclose()


async def test_a_compression_bomb_comes_out_in_bounded_pieces() -> None:
    bomb = gzip.compress(b"\0" * (64 * PIECE))  # 16 MiB of zeros in ~16 KiB
    async with compressing("gzip", bomb) as upstream:
        http = HttpClient(connect_timeout_s=2.0, read_timeout_s=10.0)
        try:
            response = await http.request("POST", upstream.url, [("content-length", "0")], body())
            sizes = [len(chunk) async for chunk in response.chunks()]
            assert max(sizes) <= PIECE and sum(sizes) == 64 * PIECE
            response.close()
        finally:
            await http.aclose()


async def test_a_coding_the_gateway_cannot_decode_fails_the_request() -> None:
    async with compressing("br", b"\x0b\x02\x80hi\x03") as upstream:
        http = HttpClient(connect_timeout_s=2.0, read_timeout_s=10.0)
        try:
            with pytest.raises(Broken, match="content-encoding 'br'"):
                await http.request("POST", upstream.url, [("content-length", "0")], body())
            await upstream.until(lambda: upstream.open == 0)  # dropped, not pooled
        finally:
            await http.aclose()

"""A request body at hand (a list: an in-process pick's, or one the pick carried inline) goes
upstream exactly as a streamed one does: once, whole, and whole again when the request is
sent afresh after the keep-alive race; and an in-process pick's body is pulled at once,
leaving nothing held in the picker's store."""

from __future__ import annotations

import asyncio
import json

import pytest

from kinference.gateway.http1 import HttpClient
from kinference.gateway.http1_send import REPLAY_MAX
from tests.api.helpers import nothing_held, wait_until
from tests.conftest import MODEL
from tests.gateway.conftest import Stack
from tests.gateway.counting_upstream import OK, Upstream, read_request


def client() -> HttpClient:
    return HttpClient(connect_timeout_s=2.0, read_timeout_s=10.0)


async def test_a_body_at_hand_is_sent_whole_once_and_again_after_the_race() -> None:
    """Each connection answers one request, then closes as the next arrives: the second
    request, its body a list of two pieces, loses the race on the pooled connection and
    goes again on a fresh one with the same bytes, not the pieces twice or none."""
    bodies: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _head, body = await read_request(reader)
        bodies.append(body)
        writer.write(OK)
        await writer.drain()
        await reader.read(1)  # the next request is on its way: close under it
        writer.close()
        raise ConnectionResetError

    async with Upstream(answer) as upstream:
        http = client()
        try:
            for pieces in ([b'{"a":', b"1}"], [b'{"b":', memoryview(b"22}")]):
                length = [("content-length", str(sum(map(len, pieces))))]
                response = await http.request("POST", upstream.url, length, list(pieces))
                try:
                    assert (response.status, await response.read()) == (200, b"ok")
                finally:
                    response.close()
        finally:
            await http.aclose()
        await upstream.until(lambda: upstream.open == 0)
    assert bodies == [b'{"a":1}', b'{"b":22}']
    assert upstream.accepted == 2  # the pooled connection lost the race once


@pytest.mark.parametrize("size", [3000, REPLAY_MAX + 1000])
async def test_a_picked_body_at_hand_or_pulled_reaches_the_engine_and_nothing_stays_held(
    stack: Stack, size: int
) -> None:
    """In process, a body of at most `REPLAY_MAX` is pulled at once at dispatch, a larger
    one through PullBody's stream (remote: PullBody or inline, as before); either way the
    engine answers it and the picker holds nothing after."""
    body = json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "y" * size}], "max_tokens": 3}
    ).encode()
    async with stack.http() as http:
        answer = await http.post("/v1/chat/completions", content=body)
    assert answer.status_code == 200, answer.text[:300]
    assert answer.json()["usage"]["completion_tokens"] == 3
    await wait_until(lambda: nothing_held(stack.picker), what="everything released")

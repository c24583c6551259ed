"""The keep-alive race end to end: an engine that closes each connection after one response
(without `connection: close`), so every request after the first goes out on a connection
closing under it; the gateway's picker remote or hosted, the body inline or pulled."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest

from kinference.config import parse_policy
from tests.api.helpers import nothing_held, wait_until
from tests.conftest import MODEL, PickerFactory
from tests.gateway.conftest import GatewayFactory, free_port, gateway_in_mode, policy_text
from tests.gateway.counting_upstream import Upstream, read_request

ANSWER = json.dumps({
    "id": "c1", "object": "chat.completion", "model": MODEL,
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}).encode()  # fmt: skip
OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(ANSWER),
    ANSWER,
)


class Engine(Upstream):
    """Answers the first request on each connection; as the next one begins (the engine's
    keep-alive timer firing), resets the connection."""

    def __init__(self) -> None:
        super().__init__(self.once)
        self.answered = 0

    async def once(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(OK)
        await writer.drain()
        self.answered += 1
        await reader.read(1)
        writer.transport.abort()
        raise ConnectionResetError


@pytest.mark.parametrize("mode", ["remote", "in-process"])
async def test_every_request_is_answered_a_large_body_too(
    mode: str, start_picker: PickerFactory, start_gateway: GatewayFactory
) -> None:
    async with Engine() as engine:
        endpoint = engine.url.removeprefix("http://")
        dead = f"127.0.0.1:{free_port()}"
        picker = await start_picker(parse_policy(policy_text([endpoint], dead, dead)))
        gateway = await gateway_in_mode(mode, picker, start_gateway)
        url = f"http://127.0.0.1:{gateway.port}"
        async with httpx.AsyncClient(base_url=url, timeout=30, trust_env=False) as http:
            for n in range(1, 6):  # inline in remote mode, pulled in-process
                messages = [{"role": "user", "content": "hello"}]
                request = {"model": MODEL, "messages": messages, "max_tokens": 4}
                response = await http.post("/v1/chat/completions", json=request)
                assert response.status_code == 200, response.text
                assert engine.answered == n  # after the first: reset, sent again
            # Over 256 KiB (pulled in either mode): held out of the replay budget while
            # the race lasts and sent again (before: 502).
            messages = [{"role": "user", "content": "x" * 300_000}]
            request = {"model": MODEL, "messages": messages, "max_tokens": 4}
            response = await http.post("/v1/chat/completions", json=request)
            assert response.status_code == 200, response.text
            assert engine.answered == 6

            # The same body uploaded chunked (no content-length): the upstream request
            # still declares its length (the pick's body_total_bytes), so it is held and
            # sent again like any other; no upstream request has a body of unknown length.
            async def chunked() -> AsyncIterator[bytes]:
                body = json.dumps(request).encode()
                for start in range(0, len(body), 64 * 1024):
                    yield body[start : start + 64 * 1024]

            response = await http.post("/v1/chat/completions", content=chunked())
            assert response.request.headers.get("transfer-encoding") == "chunked"
            assert response.status_code == 200, response.text
            assert engine.answered == 7
        await wait_until(lambda: nothing_held(picker), what="nothing held")

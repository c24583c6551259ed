"""The routing benchmark's client keeps its connections: a streamed reply is read to its end.

A reply left unread after `data: [DONE]` closes its connection, so every request paid a new
connection (the client's connect, the server's accept on its loop) on its way to the first
token; a real client (OpenAI's SDK) reads the stream to its end and reuses the connection.
"""

from __future__ import annotations

import asyncio
import time

from loadtest.routing_bench.drivers import http_client
from loadtest.routing_bench.stream import stream_chat

_EVENTS = (
    b'data: {"id":"r1","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n',
    b'data: {"id":"r1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n',
    b"data: [DONE]\n\n",
)


class _SseServer:
    """HTTP/1.1 keep-alive: each request gets `_EVENTS` as chunked SSE, each event a write."""

    def __init__(self) -> None:
        self.connections = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.lower().split(b"\r\n")
                    if line.startswith(b"content-length:")
                )
                await reader.readexactly(length)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                )
                for event in _EVENTS:
                    writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def test_one_connection_serves_every_request() -> None:
    server = _SseServer()
    listening = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}"
    client = http_client()
    try:
        for _ in range(3):
            result = await stream_chat(client, url, b'{"stream":true}', time.perf_counter())
            assert (result.chunks, result.prompt_tokens, result.response_id) == (1, 3, "r1")
    finally:
        await client.aclose()
        listening.close()
        await listening.wait_closed()
    assert server.connections == 1

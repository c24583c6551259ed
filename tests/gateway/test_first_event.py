"""The hop adds no wait of its own to a stream's first token: the first event reaches the
client while the upstream still holds the second, and both of the gateway's sockets (to the
client, to the engine) send without Nagle's delay (TCP_NODELAY: a response written in two
small sends would otherwise wait for the peer's delayed ACK, up to 40 ms on Linux)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

import httpx
import pytest

from kinference.config import parse_policy
from tests.conftest import MODEL, PickerFactory
from tests.gateway.conftest import GatewayFactory, free_port, gateway_in_mode, policy_text
from tests.gateway.counting_upstream import Upstream, read_request

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)
FIRST = b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"first"}}]}\n\n'
SECOND = b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"second"}}]}\n\n'
USAGE = b'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
DONE = b"data: [DONE]\n\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class HeldUpstream(Upstream):
    """Sends the head and the first event, then holds the rest until `release` is set;
    remembers the address the gateway connected from."""

    def __init__(self) -> None:
        super().__init__(self._answer_held)
        self.release = asyncio.Event()
        self.peers: list[tuple[str, int]] = []

    async def _answer_held(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await read_request(reader)
        self.peers.append(writer.get_extra_info("peername")[:2])
        writer.write(SSE_HEAD + _chunk(FIRST))
        await writer.drain()
        await self.release.wait()
        writer.write(_chunk(SECOND + USAGE + DONE) + b"0\r\n\r\n")
        await writer.drain()


def nodelay_of(*, local: tuple[str, int] | None = None, peer: tuple[str, int] | None = None) -> int:
    """TCP_NODELAY of this process's TCP socket with that local or peer address (the
    gateway runs in the test's process)."""
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError, ValueError):
            sock = _socket_of(int(name))
            with sock:
                if sock.type != socket.SOCK_STREAM or sock.family != socket.AF_INET:
                    continue
                with contextlib.suppress(OSError):
                    if (local and sock.getsockname()[:2] == local) or (
                        peer and sock.getpeername()[:2] == peer
                    ):
                        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    raise AssertionError(f"no socket at local {local} / peer {peer}")


def _socket_of(fd: int) -> socket.socket:
    """A socket on a duplicate of `fd`; raises OSError if it is none (its duplicate closed:
    a leaked duplicate of a parse worker's stdin kept that worker from ever seeing EOF)."""
    duplicate = os.dup(fd)
    try:
        return socket.socket(fileno=duplicate)
    except OSError:
        os.close(duplicate)
        raise


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="finds sockets in /proc")
@pytest.mark.parametrize("mode", ["in-process", "remote"])
async def test_the_first_event_reaches_the_client_before_the_second_is_sent(
    mode: str, start_picker: PickerFactory, start_gateway: GatewayFactory
) -> None:
    dead = f"127.0.0.1:{free_port()}"
    async with HeldUpstream() as upstream:
        endpoint = upstream.url.removeprefix("http://")
        picker = await start_picker(parse_policy(policy_text([endpoint], dead, dead)))
        gateway = await gateway_in_mode(mode, picker, start_gateway)
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        got = b""
        async with (
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{gateway.port}", trust_env=False) as http,
            asyncio.timeout(10),  # a gateway holding the first event until the second: fails
            http.stream("POST", "/v1/chat/completions", json=body) as response,
        ):
            assert response.status_code == 200
            async for piece in response.aiter_raw():
                got += piece
                if FIRST in got and not upstream.release.is_set():
                    assert SECOND not in got
                    # While the connections are in use: both of the gateway's sockets.
                    client = (
                        "127.0.0.1",
                        response.extensions["network_stream"].get_extra_info("client_addr")[1],
                    )
                    assert nodelay_of(peer=client) == 1  # the gateway's, to the client
                    assert nodelay_of(local=upstream.peers[0]) == 1  # to the engine
                    upstream.release.set()
        assert got == FIRST + SECOND + USAGE + DONE

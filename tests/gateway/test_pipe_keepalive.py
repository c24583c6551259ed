"""Piped streams and the client's connection: two requests pipelined on one connection get
two whole responses, each framed as sent (one chunked terminator each, the second's bytes
after the first's end), piped writes and ASGI sends never interleaved."""

from __future__ import annotations

import asyncio
import json

import h11
import pytest

from tests.conftest import PickerFactory
from tests.gateway.conftest import GatewayFactory
from tests.gateway.counting_upstream import Upstream, read_request
from tests.gateway.test_midstream import gateway_to
from tests.gateway.test_pipe import chat, per_event
from tests.gateway.test_pipe_server import ASKED, SSE_HEAD, counted_writes


async def test_pipelined_streams_each_arrive_whole_and_framed(
    start_picker: PickerFactory, start_gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = counted_writes(monkeypatch)
    streams = [per_event(chat(8)), per_event(chat(3))]
    answered = iter(streams)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD)
        for one in next(answered):
            writer.write(b"%x\r\n%s\r\n" % (len(one), one))
            await writer.drain()
            await asyncio.sleep(0)  # one read each, most often
        writer.write(b"0\r\n\r\n")

    async with Upstream(answer) as upstream:
        _picker, url = await gateway_to(upstream, start_picker, start_gateway)
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        client = h11.Connection(h11.CLIENT)
        body = json.dumps(ASKED).encode()
        request = h11.Request(
            method="POST",
            target="/v1/chat/completions",
            headers=[("host", host), ("content-type", "application/json"),
                     ("content-length", str(len(body)))],
        )  # fmt: skip
        # Both at once: the second's head arrives while the first is streamed.
        writer.write(
            client.send(request) + client.send(h11.Data(body)) + client.send(h11.EndOfMessage())
        )
        second = h11.Connection(h11.CLIENT)
        writer.write(
            second.send(request) + second.send(h11.Data(body)) + second.send(h11.EndOfMessage())
        )
        got: list[bytes] = []
        for connection in (client, second):
            data = b""
            while True:
                event = connection.next_event()
                if event is h11.NEED_DATA:
                    raw = await asyncio.wait_for(reader.read(65536), 30)
                    assert raw, "the connection closed"
                    connection.receive_data(raw)
                    continue
                if isinstance(event, h11.Response):
                    assert event.status_code == 200
                elif isinstance(event, h11.Data):
                    data += event.data
                elif isinstance(event, h11.EndOfMessage):
                    break
            got.append(data)
            if connection is client and (rest := connection.trailing_data[0]):
                second.receive_data(rest)  # the bytes past the first's end: the second's
        writer.close()
    assert got == [b"".join(s) for s in streams]
    assert any(answers)  # piped

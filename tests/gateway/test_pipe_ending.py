"""A piped read the client's socket refused, then the response's end before the body's
iteration yields it: the HTTP layer must not send that read as the body's last when more
follows (the tail of an unended event, a transform's closing events), else what follows
goes after the chunked terminator (uvicorn refuses it: the client loses it, the picker
hears an Abort for a whole response)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import pytest

from kinference.gateway.http1 import Response
from kinference.gateway.http1_conn import Conn
from kinference.gateway.relay import Relay
from kinference.gateway.timing import TokenClock
from kinference.gateway.translate import Translator
from kinference.requests.shapes import Shape
from tests.gateway.test_pipe import MOST, STREAM, Log, per_event


class EndsWhileStalled:
    """`http1.Response` where every read goes to the sink, the last one too (its body bytes
    came in a read of their own), and the sink refuses the last: the chunked terminator then
    arrives before the body's iteration resumes (drained: nothing more to read)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.status = 200
        self.headers = [("content-type", "text/event-stream")]
        self.decoded = False
        self.drained = False
        self._chunks = list(chunks)

    def header(self, name: str) -> str:
        return dict(self.headers).get(name, "")

    async def next_chunk(self) -> bytes | None:
        if self._chunks:
            chunk = self._chunks.pop(0)
            self.drained = not self._chunks
            return chunk
        self.drained = True
        return None

    async def pipe(self, sink: Callable[[bytes], bool]) -> None:
        while self._chunks:
            last = len(self._chunks) == 1
            if not sink(self._chunks.pop(0)) or last:
                self.drained = not self._chunks
                return

    def close(self) -> None:
        pass


async def sent(chunks: list[bytes], transform: Any) -> tuple[list[tuple[bytes, bool]], Log]:
    """What the HTTP layer sends (bytes, more_body False), as exchange.py does; the last
    direct write refused."""
    log = Log()
    relay = Relay(
        cast(Response, EndsWhileStalled(chunks)), TokenClock(), log, fallback_model="m",
        transform=transform, max_whole_bytes=MOST,
    )  # fmt: skip
    writes = iter(range(len(chunks) - 1))
    relay.direct = lambda body: next(writes, None) is not None
    out: list[tuple[bytes, bool]] = []
    ended = False
    async for chunk in relay.body():
        assert not ended, "a body message after the one that ended the response"
        ended = relay.ending
        out.append((chunk, ended))
    relay.finish()
    return out, log


@pytest.mark.parametrize(
    "chunks",
    [
        [*per_event(STREAM)[:-2], per_event(STREAM)[-2] + b"data: [DONE]"],
        [*per_event(STREAM)[:-2], per_event(STREAM)[-2] + b"data: {"],
    ],
    ids=["[DONE] unended", "an event cut"],
)
async def test_the_unended_tail_follows_a_stalled_last_read(chunks: list[bytes]) -> None:
    out, log = await sent(chunks, None)
    assert out[-1][1] or out[-1][0] == chunks[-1]
    assert [e[0] for e in log.entries].count("final") == 1


async def test_a_transforms_end_follows_a_stalled_last_read() -> None:
    chunks = per_event(STREAM)[:-3]  # a token last: no finish, no usage, no [DONE]
    out, log = await sent(chunks, Translator(Shape.ANTHROPIC_MESSAGES, 200, True))
    assert b"message_stop" in b"".join(body for body, _ in out)
    assert [e[0] for e in log.entries].count("final") == 1


class _Transport:
    def get_extra_info(self, name: str) -> None:
        return None

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class _Pool:
    def release(self, conn: Conn) -> None:
        pass


async def test_the_real_connection_ends_between_the_refused_read_and_the_yield() -> None:
    """The same with `http1`'s own connection: the refused read, then a read holding only
    the chunked terminator, both before the body's task runs again."""
    conn = Conn(("http", "upstream", 80))
    conn.connection_made(cast(Any, _Transport()))
    conn.asked = True
    events = per_event(STREAM)[:-3]  # no finish, no usage, no [DONE]
    conn.data_received(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    relay = Relay(
        Response(conn, _Pool(), 30.0), TokenClock(), Log(), fallback_model="m",
        transform=Translator(Shape.ANTHROPIC_MESSAGES, 200, True), max_whole_bytes=MOST,
    )  # fmt: skip
    relay.direct = lambda body: False  # the client's socket is full
    out: list[tuple[bytes, bool]] = []
    body = relay.body()
    reading = asyncio.ensure_future(anext(body))
    await asyncio.sleep(0)  # in `pipe`, the sink set
    conn.data_received(b"%x\r\n%s\r\n" % (len(events[0]), events[0]))  # refused: stalled
    conn.data_received(b"0\r\n\r\n")  # the end, before the task runs
    out.append((await reading, relay.ending))
    async for chunk in body:
        assert not out[-1][1], "a body message after the one that ended the response"
        out.append((chunk, relay.ending))
    assert b"message_stop" in b"".join(chunk for chunk, _ in out) and out[-1][1]

"""The relay as it is (reads piped: handed on from the upstream's read callback and written
to the client at once; a token's event told by its shape, not parsed) against the relay as
it was (each read through the body's iteration and the ASGI send, every event parsed): the
same bytes at the same boundaries, the same reports in the same order, on recorded streams
cut at odd places, with usage-only last chunks, hidden usage, CRLF line ends, tokens the
shape must not take (escapes, bad UTF-8, control bytes, another model), an endless event, a
full client socket and failures mid-stream."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
from collections.abc import Callable
from typing import Any, cast
from unittest import mock

import pytest

from kinference.gateway import usage
from kinference.gateway.http1 import Broken, Response, UpstreamError
from kinference.gateway.relay import Relay
from kinference.gateway.sse import MAX_EVENT_BYTES, SseEvent, SseSplitter
from kinference.gateway.timing import TokenClock
from kinference.gateway.usage import Usage
from kinference.gateway.usage_chunk import HideAddedUsage

MOST = 64 * 1024 * 1024
HEAD = '"id":"c1","object":"chat.completion.chunk","created":1,"model":"m-served"'


def event(body: str) -> bytes:
    return f"data: {{{HEAD},{body}}}\n\n".encode()


def chat(tokens: int, *, usage_alone: bool = True) -> bytes:
    """A chat stream: the role, `tokens` content chunks, the finish, the usage, [DONE]."""
    counts = f'"usage":{{"prompt_tokens":9,"completion_tokens":{tokens},'
    counts += '"prompt_tokens_details":{"cached_tokens":4}}'
    out = [event('"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]')]
    out += [
        event('"choices":[{"index":0,"delta":{"content":' + json.dumps(f" w{i}\u00e9") + "}}]")
        for i in range(tokens)
    ]
    finish = '"choices":[{"index":0,"delta":{},"finish_reason":"length"}]'
    if usage_alone:
        out += [event(finish), event('"choices":[],' + counts)]
    else:
        out.append(event(finish + "," + counts))
    return b"".join(out) + b"data: [DONE]\n\n"


def per_event(stream: bytes) -> list[bytes]:
    return [part + b"\n\n" for part in stream.split(b"\n\n") if part]


def every(stream: bytes, size: int) -> list[bytes]:
    return [stream[at : at + size] for at in range(0, len(stream), size)]


STREAM = chat(12)
ANTHROPIC = (
    b"event: message_start\ndata: "
    + b'{"type":"message_start","message":{"model":"claude","usage":{"input_tokens":5}}}\n\n'
    + b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"text":"a"}}'
    + b"\n\n"
    + b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"text":"b"}}'
    + b"\n\n"
    + b'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":2}}\n\n'
    + b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)
# Token texts as they stand in the event's JSON: plain, escaped, not UTF-8, a raw control
# byte (not JSON), empty (no token), a quote left open (not JSON), non-ASCII.
LITERALS = [
    b'"a"',
    b'"a\\nb"',
    b'"\\""',
    b'"\xff"',
    b'"a\tb"',
    b'""',
    b'"a',
    b'"\xc3\xa9t\xc3\xa9"',
    b'"b"',
]
TRICKY = (
    [event('"choices":[{"index":0,"delta":{"content":"first"}}]')]
    + [
        b"data: {"
        + HEAD.encode()
        + b',"choices":[{"index":0,"delta":{"content":'
        + lit
        + b"}}]}\n\n"
        for lit in LITERALS
    ]
    + [
        event('"usage":null,"choices":[{"index":0,"delta":{"content":"u"}}]'),
        event('"choices":[{"index":0,"delta":{"content":"x"}}]').replace(b"m-served", b"m-other"),
        event('"choices":[{"index":0,"delta":{"content":"two","content":""}}]'),
        event('"choices":[],"\\u0075sage":{"prompt_tokens":3,"completion_tokens":9}'),
        b"data: [DONE]\n\n",
    ]
)
HUGE = b"data: " + b"x" * (MAX_EVENT_BYTES + 10)
RECORDED = {
    "a read per event": per_event(STREAM),
    "usage on the finish": per_event(chat(5, usage_alone=False)),
    "7-byte reads": every(STREAM, 7),
    "reads across seams": every(STREAM, 101),
    "events glued": [b"".join(per_event(STREAM)[at : at + 3]) for at in range(0, 17, 3)],
    "blank line split": [STREAM[:-1], STREAM[-1:]],
    "CRLF": every(STREAM.replace(b"\n", b"\r\n"), 53),
    "CR": every(STREAM.replace(b"\n", b"\r"), 31),
    "anthropic": every(ANTHROPIC, 29),
    "no blank line at the end": [*per_event(STREAM)[:-1], b"data: [DONE]"],
    "tricky tokens": TRICKY,
    "tricky tokens, usage shape": [
        event('"usage":null,"choices":[{"index":0,"delta":{"content":"first"}}]'),
        *TRICKY[1:],
    ],
    "endless event": [event('"choices":[{"text":"a"}]'), HUGE[:1000], HUGE[1000:], b"\n\n"],
}


class Scripted:
    """A response read as `http1.Response` reads it: `next_chunk`, and `pipe` handing reads
    to a sink until the last (the read that completes the response is left for
    `next_chunk`) or until the sink answers False; fails (Broken) at read `fail_at`."""

    def __init__(self, chunks: list[bytes], fail_at: int | None = None) -> None:
        self.status = 200
        self.headers = [("content-type", "text/event-stream")]
        self.decoded = False
        self.drained = False
        self._chunks = chunks
        self._at = 0
        self._fail_at = fail_at

    def header(self, name: str) -> str:
        return dict(self.headers).get(name, "")

    def _read(self) -> bytes | None:
        if self._at == self._fail_at:
            raise Broken("the upstream closed the connection mid-response")
        if self._at >= len(self._chunks):
            return None
        self._at += 1
        self.drained = self._at == len(self._chunks)
        return self._chunks[self._at - 1]

    async def next_chunk(self) -> bytes | None:
        return self._read()

    async def pipe(self, sink: Callable[[bytes], bool]) -> None:
        while self._at < len(self._chunks) - 1 or self._at == self._fail_at:
            if not sink(cast(bytes, self._read())):
                return

    def close(self) -> None:
        pass


class Log:
    """Writes to the client and reports to the picker, in the order they happen."""

    def __init__(self) -> None:
        self.entries: list[tuple[Any, ...]] = []

    def first_token(self, ttft_ms: int, upstream_status: int) -> None:
        self.entries.append(("first", ttft_ms, upstream_status))

    def final(self, usage: Usage, clock: TokenClock, fallback_model: str) -> None:
        counts = (clock.tokens, clock.ttft_ms, clock.itl_bucket_counts, round(clock.gap_sum_s, 6))
        self.entries.append(("final", dataclasses.asdict(usage), counts))

    def abort(self, reason: int, detail: str) -> None:
        self.entries.append(("abort", reason, detail))


def ticking() -> Callable[[], float]:
    """A clock whose readings are 1 ms, 30 ms, 0.4 s, 2 s apart in turn (several buckets)."""
    gaps = itertools.cycle([0.001, 0.03, 0.4, 2.0])
    now = [100.0]

    def read() -> float:
        now[0] += next(gaps)
        return now[0]

    return read


def writer(log: Log, refuse: Callable[[int], bool]) -> Callable[[bytes], bool]:
    """The client's direct write: refuses the writes `refuse` picks (a full socket)."""
    calls = itertools.count()

    def write(body: bytes) -> bool:
        if refuse(next(calls)):
            return False
        log.entries.append(("write", body, False))
        return True

    return write


async def relayed(
    chunks: list[bytes],
    *,
    hide_usage: bool,
    refuse: Callable[[int], bool] | None,
    fail_at: int | None = None,
) -> list[tuple[Any, ...]]:
    """What the client and the picker get; `refuse` None: the relay as it was (no pipe,
    no single-event path, no shapes, the usage hidden after a parse of every event)."""
    log = Log()
    upstream = Scripted(chunks, fail_at)
    hide = (HideAddedUsage() if refuse is not None else AsItWas()) if hide_usage else None
    relay = Relay(
        cast(Response, upstream), TokenClock(ticking()), log, fallback_model="asked",
        transform=hide, max_whole_bytes=MOST,
    )  # fmt: skip
    with contextlib.ExitStack() as stack:
        if refuse is not None:
            relay.direct = writer(log, refuse)
        else:
            stack.enter_context(mock.patch.object(SseSplitter, "single", lambda _s, _c: None))
            stack.enter_context(mock.patch.object(usage, "learned", lambda _d, _j: None))
        try:
            await relay.start()
            async for chunk in relay.body():
                log.entries.append(("write", chunk, relay.ending))
        except UpstreamError as exc:
            log.entries.append(("failed", type(exc).__name__, relay.between_events))
        relay.finish()
    return log.entries


class AsItWas(HideAddedUsage):
    """The hidden usage as it was: every event parsed."""

    def event(self, event: SseEvent) -> bytes:
        document = event.json()
        if document is not None and document.get("choices") == [] and "usage" in document:
            return b""
        return event.raw


REFUSALS: dict[str, Callable[[int], bool]] = {
    "socket free": lambda _: False,
    "every third write waits": lambda n: n % 3 == 2,
    "socket always full": lambda _: True,
}


@pytest.mark.parametrize("refusal", REFUSALS)
@pytest.mark.parametrize("hide_usage", [False, True], ids=["as-is", "usage-hidden"])
@pytest.mark.parametrize("name", RECORDED)
async def test_piped_equals_relayed(name: str, hide_usage: bool, refusal: str) -> None:
    chunks = RECORDED[name]
    before = await relayed(chunks, hide_usage=hide_usage, refuse=None)
    piped = await relayed(chunks, hide_usage=hide_usage, refuse=REFUSALS[refusal])
    assert piped == before
    assert b"".join(e[1] for e in piped if e[0] == "write") == (
        b"".join(chunks) if not hide_usage else b"".join(e[1] for e in before if e[0] == "write")
    )
    assert [e[0] for e in piped].count("final") == 1


@pytest.mark.parametrize("refusal", REFUSALS)
@pytest.mark.parametrize("fail_at", [1, 2, 5, 9])
@pytest.mark.parametrize("cut", [per_event(STREAM), every(STREAM, 45)], ids=["events", "45"])
async def test_a_failure_mid_stream_ends_both_alike(
    cut: list[bytes], fail_at: int, refusal: str
) -> None:
    before = await relayed(cut, hide_usage=True, refuse=None, fail_at=fail_at)
    piped = await relayed(cut, hide_usage=True, refuse=REFUSALS[refusal], fail_at=fail_at)
    assert piped == before
    assert piped[-2][0] == "failed" and piped[-1][0] == "abort"


async def test_what_the_pipe_wrote_is_every_read_but_the_last() -> None:
    """Sanity of the comparison: the pipe is taken (all but the completing read)."""
    log = await relayed(per_event(STREAM), hide_usage=False, refuse=lambda _: False)
    writes = [e for e in log if e[0] == "write"]
    assert len(writes) == len(per_event(STREAM))
    assert [e[2] for e in writes] == [False] * (len(writes) - 1) + [True]
    assert log[1][0] == "write" and log[2][0] == "first"  # the report after the write


async def test_an_error_in_a_piped_transform_reaches_the_body_iteration() -> None:
    class Failing(HideAddedUsage):
        def event(self, event: Any) -> bytes:
            raise ValueError("transform failed")

    upstream = Scripted(per_event(STREAM))
    relay = Relay(
        cast(Response, upstream), TokenClock(), Log(), fallback_model="m",
        transform=Failing(), max_whole_bytes=MOST,
    )  # fmt: skip
    relay.direct = lambda body: True
    with pytest.raises(ValueError, match="transform failed"):
        async for _ in relay.body():
            pass

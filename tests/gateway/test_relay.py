"""The relay over a scripted upstream: hidden usage chunk, transforms, an endless event."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, cast

from kinference.gateway.http1 import Response
from kinference.gateway.relay import Relay
from kinference.gateway.sse import MAX_EVENT_BYTES
from kinference.gateway.timing import TokenClock
from kinference.gateway.usage import Usage
from kinference.gateway.usage_chunk import HideAddedUsage

MOST = 64 * 1024 * 1024  # the most of a whole body a transform rewrites


class Upstream:
    """What the relay reads of an `http1.Response`."""

    def __init__(self, chunks: list[bytes], content_type: str = "text/event-stream") -> None:
        self.status = 200
        self.headers = [("content-type", content_type), ("date", "x"), ("server", "engine")]
        self._chunks = chunks
        self.drained = False
        self.decoded = False
        self.closed = False
        self._reads: AsyncIterator[bytes] | None = None

    def header(self, name: str) -> str:
        return dict(self.headers).get(name, "")

    async def chunks(self) -> AsyncIterator[bytes]:
        for index, chunk in enumerate(self._chunks):
            self.drained = index == len(self._chunks) - 1
            yield chunk

    async def next_chunk(self) -> bytes | None:
        if self._reads is None:
            self._reads = aiter(self.chunks())
        return await anext(self._reads, None)

    def close(self) -> None:
        self.closed = True


class Reports:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def first_token(self, ttft_ms: int, upstream_status: int) -> None:
        self.calls.append(("first", upstream_status))

    def final(self, usage: Usage, clock: TokenClock, fallback_model: str) -> None:
        self.calls.append(("final", usage.completion_tokens))

    def abort(self, reason: int, detail: str) -> None:
        self.calls.append(("abort", detail))


def event(document: dict[str, Any] | str) -> bytes:
    payload = document if isinstance(document, str) else json.dumps(document)
    return f"data: {payload}\n\n".encode()


STREAM = [
    event({"choices": [{"delta": {"content": "a"}}]}) + event({"choices": [{"delta": {}}]})[:9],
    event({"choices": [{"delta": {}}]})[9:],
    event({"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 1}}) + event("[DONE]"),
]


async def relayed(upstream: Upstream, relay: Relay) -> tuple[bytes, list[bool]]:
    await relay.start()
    out, endings = [], []
    async for chunk in relay.body():
        out.append(chunk)
        endings.append(relay.ending)
    relay.finish()
    return b"".join(out), endings


async def test_usage_hidden_tokens_reported_last_chunk_marked() -> None:
    upstream, reports = Upstream(list(STREAM)), Reports()
    relay = Relay(
        cast(Response, upstream),
        TokenClock(),
        reports,
        fallback_model="m",
        transform=HideAddedUsage(),
        max_whole_bytes=MOST,
    )
    assert relay.headers == [("content-type", "text/event-stream")]
    body, endings = await relayed(upstream, relay)
    assert b'"usage"' not in body and body.endswith(b"data: [DONE]\n\n")
    assert endings[-1] and not any(endings[:-1])
    assert reports.calls == [("first", 200), ("final", 1)]  # usage read before it was hidden
    assert upstream.closed


async def test_without_transform_bytes_go_as_received() -> None:
    upstream = Upstream(list(STREAM))
    relay = Relay(
        cast(Response, upstream), TokenClock(), Reports(), fallback_model="m", max_whole_bytes=MOST
    )
    body, _ = await relayed(upstream, relay)
    assert body == b"".join(STREAM)


async def test_an_endless_event_is_relayed_not_dropped() -> None:
    huge = b"data: " + b"x" * (MAX_EVENT_BYTES + 10)
    chunks = [event({"choices": [{"text": "a"}]}), huge[:1000], huge[1000:], b"\n\n"]
    upstream = Upstream(chunks)
    relay = Relay(
        cast(Response, upstream), TokenClock(), Reports(), fallback_model="m",
        transform=HideAddedUsage(), max_whole_bytes=MOST,
    )  # fmt: skip
    body, _ = await relayed(upstream, relay)
    assert body == b"".join(chunks)


async def test_client_gone_mid_response_aborts() -> None:
    upstream, reports = Upstream(list(STREAM)), Reports()
    relay = Relay(
        cast(Response, upstream), TokenClock(), reports, fallback_model="m", max_whole_bytes=MOST
    )
    body = relay.body()
    await anext(body)
    await body.aclose()
    relay.finish()
    assert reports.calls[-1] == ("abort", "client went away mid-response")

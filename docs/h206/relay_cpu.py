"""h206: the relay's Python work per chunk, in one process, on a recorded-shape stream.

A stream shaped like the sim engine's and Dynamo's frontend's (role chunk, N content chunks
one event per read, finish chunk, usage chunk, [DONE]) goes through `Relay` and a loop that
sends as `Exchange._relay` does (a message dict per chunk, a no-op send), many times; the
thread CPU per chunk is printed, with and without the hidden-usage transform, and piped
(h206: every read but the last handed to the relay's sink and written by a no-op `direct`).

    PYTHONPATH=TREE python docs/h206/relay_cpu.py [--tokens 100] [--streams 2000]
"""

import argparse
import asyncio
import json
import time
from typing import Any, cast

from kinference.gateway.http1 import Response
from kinference.gateway.relay import Relay
from kinference.gateway.timing import TokenClock
from kinference.gateway.usage import Usage
from kinference.gateway.usage_chunk import HideAddedUsage

HEAD = (
    '{"id":"chatcmpl-3f2a","object":"chat.completion.chunk","created":1765150000,'
    '"model":"Qwen/Qwen3-0.6B"'
)
TAIL = ',"logprobs":null,"finish_reason":null}]'


def stream(tokens: int) -> list[bytes]:
    def ev(choices: str, extra: str = "") -> bytes:
        return f'data: {HEAD},"choices":{choices}{extra}}}\n\n'.encode()

    out = [ev('[{"index":0,"delta":{"role":"assistant","content":""}' + TAIL)]
    for i in range(tokens):
        word = json.dumps(f" word{i}")
        out.append(ev(f'[{{"index":0,"delta":{{"content":{word}}}' + TAIL))
    out.append(ev('[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]'))
    counts = {
        "prompt_tokens": 1500,
        "completion_tokens": tokens,
        "total_tokens": tokens + 1500,
        "prompt_tokens_details": {"cached_tokens": 1400},
    }
    usage = ',"usage":' + json.dumps(counts, separators=(",", ":"))
    out.append(ev("[]", usage) + b"data: [DONE]\n\n")
    return out


class Upstream:
    def __init__(self, chunks: list[bytes]) -> None:
        self.status = 200
        self.headers = [("content-type", "text/event-stream"), ("server", "engine")]
        self._chunks = chunks
        self._at = 0
        self.drained = False
        self.decoded = False

    def header(self, name: str) -> str:
        for key, value in self.headers:
            if key == name:
                return value
        return ""

    async def next_chunk(self) -> bytes | None:
        at = self._at
        if at >= len(self._chunks):
            return None
        self._at = at + 1
        self.drained = self._at == len(self._chunks)
        return self._chunks[at]

    async def pipe(self, sink: Any) -> None:  # every read but the last, as Conn hands them
        while self._at < len(self._chunks) - 1:
            self._at += 1
            if not sink(self._chunks[self._at - 1]):
                return

    def close(self) -> None:
        pass


class Reports:
    def first_token(self, ttft_ms: int, upstream_status: int) -> None:
        pass

    def final(self, usage: Usage, clock: TokenClock, fallback_model: str) -> None:
        self.usage = usage

    def abort(self, reason: int, detail: str) -> None:
        raise AssertionError(detail)


async def one(chunks: list[bytes], transform: Any, piped: bool) -> int:
    upstream = Upstream(chunks)
    relay = Relay(
        cast(Response, upstream),
        TokenClock(),
        Reports(),
        fallback_model="m",
        transform=transform,
        max_whole_bytes=1 << 26,
    )
    sent = 0

    async def send(message: dict[str, Any]) -> None:
        nonlocal sent
        sent += len(message["body"])

    def direct(body: bytes) -> bool:
        nonlocal sent
        sent += len(body)
        return True

    if piped and hasattr(relay, "direct"):
        relay.direct = direct
    await relay.start()
    ended = False
    async for chunk in relay.body():
        ended = relay.ending
        await send({"type": "http.response.body", "body": chunk, "more_body": not ended})
    relay.finish()
    return sent


async def main() -> None:
    cli = argparse.ArgumentParser()
    cli.add_argument("--tokens", type=int, default=100)
    cli.add_argument("--streams", type=int, default=2000)
    cli.add_argument("--repeats", type=int, default=5)
    args = cli.parse_args()
    chunks = stream(args.tokens)
    modes = [(t, p) for p in (False, True) for t in ("no transform", "hide usage")]
    for name, piped in modes:
        make = HideAddedUsage if name == "hide usage" else lambda: None
        best = []
        for _ in range(args.repeats):
            start = time.thread_time()
            for _ in range(args.streams):
                await one(chunks, make(), piped)
            best.append((time.thread_time() - start) / args.streams / len(chunks) * 1e6)
        name += ", piped" if piped else ""
        print(
            f"{name}: µs per chunk, min {min(best):.2f} median {sorted(best)[len(best) // 2]:.2f}"
        )


asyncio.run(main())

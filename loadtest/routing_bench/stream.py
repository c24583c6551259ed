"""One streamed chat completion over HTTP, timed by the caller: TTFT, gaps, usage.

TTFT is measured from `started` (which a gateway driver sets before it even asks the
picker) to the first chunk carrying content; the usage comes from the final chunk that
`stream_options.include_usage` asks for.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from loadtest.engine_model import ITL_EDGES_MS

_DATA = "data:"


class StreamError(RuntimeError):
    """The upstream answered with an error status or a stream without usage."""


@dataclass
class StreamResult:
    """What the caller saw of one response (seconds from the request's start)."""

    status: int
    response_id: str = ""  # the first event's `id`: the simulated engine's names its seed
    ttft_s: float = 0.0
    total_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    chunks: int = 0
    gaps_s: list[float] = field(default_factory=list)  # between content chunks
    pieces: list[str] = field(default_factory=list)  # the generated text, chunk by chunk

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def itl_buckets(self) -> list[int]:
        """Layout-1 counts of the gaps between content chunks (ReportFinalToken)."""
        if not self.gaps_s:
            return []
        counts = [0] * (len(ITL_EDGES_MS) + 1)
        for gap in self.gaps_s:
            gap_ms = gap * 1000.0
            index = next(
                (i for i, edge in enumerate(ITL_EDGES_MS) if gap_ms <= edge), len(ITL_EDGES_MS)
            )
            counts[index] += 1
        return counts


def _content(event: dict[str, object]) -> str:
    choices = event.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return ""
    delta = choices[0].get("delta")
    content = delta.get("content") if isinstance(delta, dict) else None
    return content if isinstance(content, str) else ""


def _usage(result: StreamResult, usage: dict[str, object]) -> None:
    result.prompt_tokens = int(usage.get("prompt_tokens") or 0)  # type: ignore[call-overload]
    result.completion_tokens = int(usage.get("completion_tokens") or 0)  # type: ignore[call-overload]
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict):
        result.cached_tokens = int(details.get("cached_tokens") or 0)


def _on_event(result: StreamResult, event: dict[str, object], now: float, last: float) -> float:
    """Record one SSE event; returns the time of the latest content chunk."""
    if isinstance(event.get("usage"), dict):
        _usage(result, event["usage"])  # type: ignore[arg-type]
    if not result.response_id and isinstance(event.get("id"), str):
        result.response_id = event["id"]  # type: ignore[assignment]
    content = _content(event)
    if not content:
        return last
    result.pieces.append(content)
    if result.chunks == 0:
        result.ttft_s = now
    else:
        result.gaps_s.append(now - last)
    result.chunks += 1
    return now


async def stream_chat(
    client: httpx.AsyncClient,
    url: str,
    body: bytes,
    started: float,
    on_first: Callable[[float], None] | None = None,
) -> StreamResult:
    """POST `body` to `url` + /v1/chat/completions and read the SSE stream to its end.

    `on_first(ttft_s)` is called once, as the first content chunk arrives.
    """
    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    async with client.stream(
        "POST", f"{url}/v1/chat/completions", content=body, headers=headers
    ) as response:
        result = StreamResult(response.status_code)
        if response.status_code != 200:
            detail = (await response.aread())[:200]
            raise StreamError(f"{url} answered {response.status_code}: {detail!r}")
        last, done = 0.0, False
        # Read on to the body's end after [DONE] (as OpenAI's SDK does): a response left
        # unread closes its connection, and every request would then open a new one.
        async for line in response.aiter_lines():
            if done or not line.startswith(_DATA):
                continue
            payload = line[len(_DATA) :].strip()
            if payload == "[DONE]":
                done = True
                continue
            seen = result.chunks
            last = _on_event(result, json.loads(payload), time.perf_counter() - started, last)
            if on_first is not None and seen == 0 and result.chunks == 1:
                on_first(result.ttft_s)
    result.total_s = time.perf_counter() - started
    if result.chunks == 0 or result.prompt_tokens == 0:
        raise StreamError(f"{url}: a stream without content or usage")
    return result

"""Metering responses: content events, usage and model from SSE or JSON, any chunking."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kinference.gateway.timing import TokenClock
from kinference.gateway.usage import MAX_JSON_BYTES, ResponseMeter, Usage


def sse(*events: dict[str, Any] | str, crlf: bool = False) -> bytes:
    end = "\r\n" if crlf else "\n"
    parts = [
        f"data: {event if isinstance(event, str) else json.dumps(event)}{end}{end}"
        for event in events
    ]
    return "".join(parts).encode()


def chat_chunk(content: str | None = None, role: str | None = None) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    return {"model": "served", "choices": [{"index": 0, "delta": delta}]}


USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}}
CHAT_STREAM = sse(
    chat_chunk("", role="assistant"),  # role only: not a token
    chat_chunk("Hel"),
    chat_chunk("lo"),
    chat_chunk("!"),
    {"model": "served", "choices": [], "usage": USAGE},
    "[DONE]",
)


def meter_all(data: bytes, chunk: int, *, event_stream: bool = True) -> tuple[Usage, int, int]:
    meter = ResponseMeter(event_stream=event_stream, clock=TokenClock())
    firsts = sum(meter.feed(data[i : i + chunk]) for i in range(0, len(data), chunk))
    usage = meter.finish()
    return usage, firsts, meter.clock.tokens


@pytest.mark.parametrize("chunk", [1, 7, 64, 10_000])
def test_chat_stream_any_chunking(chunk: int) -> None:
    usage, firsts, tokens = meter_all(CHAT_STREAM, chunk)
    assert firsts == 1
    assert tokens == 3
    assert usage == Usage("served", 11, 3, 4, from_response=True)


def test_crlf_events_and_multiline_data() -> None:
    data = sse(chat_chunk("a"), crlf=True) + b'data: {"choices": [{"text":\ndata: "b"}]}\n\n'
    usage, firsts, tokens = meter_all(data, 3)
    assert (firsts, tokens) == (1, 2)
    assert usage.completion_tokens == 2 and not usage.from_response  # counted, not reported


def test_completions_responses_and_anthropic_content() -> None:
    completions = sse({"choices": [{"text": "x"}]}, {"choices": [{"text": ""}]})
    assert meter_all(completions, 5)[2] == 1
    responses = sse(
        {"type": "response.output_text.delta", "delta": "x"},
        {"type": "response.completed", "response": {"model": "m", "usage": USAGE | {}}},
    )
    usage, _, tokens = meter_all(responses, 9)
    assert tokens == 1 and usage.model == "m" and usage.prompt_tokens == 11
    anthropic = sse(
        {"type": "message_start", "message": {"model": "claude", "usage": {"input_tokens": 9}}},
        {"type": "content_block_delta", "delta": {"text": "hi"}},
        {"type": "message_delta", "usage": {"output_tokens": 5, "cache_read_input_tokens": 2}},
    )
    usage, _, tokens = meter_all(anthropic, 4)
    assert tokens == 1
    assert usage == Usage("claude", 9, 5, 2, from_response=True)


def test_whole_json_response() -> None:
    body = json.dumps({"model": "served", "usage": USAGE, "choices": []}).encode()
    usage, firsts, _ = meter_all(body, 10, event_stream=False)
    assert firsts == 1  # the first byte is the first token of a whole response
    assert usage == Usage("served", 11, 3, 4, from_response=True)


def test_oversized_json_is_not_parsed() -> None:
    body = b'{"usage": {"prompt_tokens": 1}, "pad": "' + b"x" * MAX_JSON_BYTES + b'"}'
    usage, firsts, _ = meter_all(body, 1024 * 1024, event_stream=False)
    assert firsts == 1
    assert usage == Usage()


def test_garbage_is_ignored() -> None:
    usage, firsts, tokens = meter_all(b"data: not json\n\n: comment\n\nevent: x\n\n", 4)
    assert (firsts, tokens) == (0, 0)
    assert usage == Usage()

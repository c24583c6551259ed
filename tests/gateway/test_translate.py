"""The pure response translators: whole bodies, errors and event streams, each direction."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kinference.gateway.sse import SseSplitter as Splitter
from kinference.gateway.translate import Translator, translator_for
from kinference.requests import Shape

CHAT_TO_MESSAGES = (Shape.ANTHROPIC_MESSAGES, Shape.CHAT)  # (client wrote, upstream speaks)
MESSAGES_TO_CHAT = (Shape.CHAT, Shape.ANTHROPIC_MESSAGES)


def whole(translated: tuple[Shape, Shape], document: dict[str, Any], status: int = 200) -> Any:
    translator = translator_for(translated, status, event_stream=False)
    assert translator is not None
    return json.loads(translator.whole(json.dumps(document).encode()))


def streamed(translator: Translator, raw: bytes, pieces: int = 7) -> list[tuple[str, Any]]:
    """The events the client gets for `raw` fed in `pieces` odd-sized reads."""
    splitter, out = Splitter(), b""
    step = max(1, len(raw) // pieces)
    for start in range(0, len(raw), step):
        out += b"".join(translator.event(e) for e in splitter.feed(raw[start : start + step]))
    out += translator.end()
    events = Splitter().feed(out)
    return [(e.name, e.json() if not e.done else "[DONE]") for e in events]


def chat_chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    payload = {
        "id": "c1",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, **extra}],
    }
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


@pytest.mark.parametrize(
    ("finish", "extra", "stop_reason", "stop_sequence"),
    [
        ("stop", {}, "end_turn", None),
        ("length", {}, "max_tokens", None),
        ("tool_calls", {}, "tool_use", None),
        ("content_filter", {}, "refusal", None),
        ("stop", {"stop_reason": "END"}, "stop_sequence", "END"),  # vLLM names the match
    ],
)
def test_chat_completion_as_a_message(
    finish: str, extra: dict[str, Any], stop_reason: str, stop_sequence: str | None
) -> None:
    document = {
        "id": "chatcmpl-1",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hi"},
                "finish_reason": finish,
                **extra,
            }
        ],
        "usage": {
            "prompt_tokens": 5,
            "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 3},
        },
    }
    message = whole(CHAT_TO_MESSAGES, document)
    assert message["type"] == "message" and message["content"] == [{"type": "text", "text": "hi"}]
    assert (message["stop_reason"], message["stop_sequence"]) == (stop_reason, stop_sequence)
    assert message["usage"] == {"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": 3}


def test_message_as_a_chat_completion() -> None:
    document = {
        "id": "msg_1",
        "type": "message",
        "model": "m",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "text", "text": "a"},
            {"type": "tool_use", "id": "t", "name": "f", "input": {"x": 1}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 4, "output_tokens": 3, "cache_read_input_tokens": 6},
    }
    completion = whole(MESSAGES_TO_CHAT, document)
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "a" and choice["message"]["reasoning_content"] == "hmm"
    assert choice["message"]["tool_calls"] == [
        {"id": "t", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
    ]
    assert completion["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 3,
        "total_tokens": 13,
        "prompt_tokens_details": {"cached_tokens": 6},
    }


def test_errors_change_shape() -> None:
    openai_error = {"error": {"message": "bad", "type": "invalid_request_error", "code": None}}
    assert whole(CHAT_TO_MESSAGES, openai_error, 400) == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "bad"},
    }
    anthropic_error = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    assert whole(MESSAGES_TO_CHAT, anthropic_error, 529)["error"] == {
        "message": "busy",
        "type": "overloaded_error",
        "param": None,
        "code": None,
    }
    translator = translator_for(CHAT_TO_MESSAGES, 502, event_stream=False)
    assert translator is not None and translator.whole(b"Bad Gateway") == b"Bad Gateway"


def test_chat_stream_as_message_events() -> None:
    raw = b"".join(
        [
            chat_chunk({"role": "assistant", "content": ""}),
            chat_chunk({"content": "Hel"}),
            chat_chunk({"content": "lo"}),
            chat_chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "call", "function": {"name": "f", "arguments": '{"a"'}}
                    ]
                }
            ),
            chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}),
            chat_chunk({}, "tool_calls"),
            b'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4}}\n\n',
            b"data: [DONE]\n\n",
        ]
    )
    translator = translator_for(CHAT_TO_MESSAGES, 200, event_stream=True)
    assert translator is not None
    events = streamed(translator, raw)
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[5][1]["content_block"] == {
        "type": "tool_use",
        "id": "call",
        "name": "f",
        "input": {},
    }
    assert events[7][1]["delta"] == {"type": "input_json_delta", "partial_json": ": 1}"}
    assert events[9][1]["delta"]["stop_reason"] == "tool_use"
    assert events[9][1]["usage"] == {"input_tokens": 9, "output_tokens": 4}


def test_a_chat_stream_cut_short_still_ends_as_a_message() -> None:
    translator = translator_for(CHAT_TO_MESSAGES, 200, event_stream=True)
    assert translator is not None
    events = streamed(translator, chat_chunk({"content": "Hi"}))
    assert [name for name, _ in events][-2:] == ["message_delta", "message_stop"]


def anthropic_event(payload: dict[str, Any]) -> bytes:
    return f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n".encode()


MESSAGE_STREAM = b"".join(
    anthropic_event(e)
    for e in [
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "model": "m",
                "usage": {"input_tokens": 7, "output_tokens": 1},
            },
        },
        {"type": "ping"},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "{}"},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens"},
            "usage": {"output_tokens": 5},
        },
        {"type": "message_stop"},
    ]
)


@pytest.mark.parametrize("asked", [False, True])
def test_message_stream_as_chat_chunks(asked: bool) -> None:
    translator = translator_for(MESSAGES_TO_CHAT, 200, event_stream=True, usage_asked=asked)
    assert translator is not None
    events = streamed(translator, MESSAGE_STREAM, pieces=13)
    assert events[-1] == ("", "[DONE]")
    chunks = [payload for _, payload in events[:-1]]
    assert all(
        c["object"] == "chat.completion.chunk" and c["id"] == "chatcmpl-msg_1" for c in chunks
    )
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[1] == {"content": "Hi"}
    assert deltas[2]["tool_calls"][0]["function"] == {"name": "f", "arguments": ""}
    assert deltas[3]["tool_calls"][0] == {"index": 0, "function": {"arguments": "{}"}}
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "length"
    usage = [c for c in chunks if not c["choices"]]
    if asked:
        assert usage[0]["usage"] == {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
    else:
        assert usage == []


def test_only_the_two_conversation_apis_translate() -> None:
    assert translator_for(None, 200, event_stream=True) is None
    assert translator_for((Shape.RESPONSES, Shape.CHAT), 200, event_stream=True) is None

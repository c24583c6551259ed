"""Request bodies translated between Anthropic Messages and OpenAI chat, spliced by rewrite."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kinference.requests import RewritePlan, Shape, parse_request, rewrite
from kinference.requests.rewrite import MAX_TRANSLATED_BYTES
from kinference.requests.translation import DEFAULT_MAX_TOKENS, Untranslatable
from tests.requests import scanned_body, whole_body

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
ANTHROPIC = {
    "model": "claude",
    "max_tokens": 100,
    "system": [{"type": "text", "text": "Be brief."}],
    "stop_sequences": ["END"],
    "top_k": 5,
    "thinking": {"type": "enabled", "budget_tokens": 10},
    "metadata": {"user_id": "u1"},
    "stream": True,
    "tools": [
        {"name": "weather", "description": "d", "input_schema": SCHEMA},
        {"type": "web_search_20250305", "name": "web_search"},  # a server tool: no equivalent
    ],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
    "messages": [
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "AAA"},
                },
                {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                {"type": "text", "text": "Weather?"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "sunny"}],
                },
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ],
}
CHAT = {
    "model": "claude",
    "max_tokens": 100,
    "stream": True,
    "messages": [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                {"type": "text", "text": "Weather?"},
            ],
        },
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "sunny"},
        {"role": "user", "content": [{"type": "text", "text": "And tomorrow?"}]},
    ],
    "stop": ["END"],
    "user": "u1",
    "tools": [
        {
            "type": "function",
            "function": {"name": "weather", "parameters": SCHEMA, "description": "d"},
        }
    ],
    "tool_choice": "required",
    "parallel_tool_calls": False,
    "stream_options": {"include_usage": True},
}


def translated(
    doc: dict[str, Any], to: Shape, model: str = "served", scanned: bool = False
) -> dict[str, Any]:
    data = json.dumps(doc).encode()
    body = scanned_body(data) if scanned else whole_body(data)
    out = rewrite(body, parse_request(body), RewritePlan(model=model, sent_shape=to))
    result: dict[str, Any] = json.loads(b"".join(bytes(p) for p in out.pieces))
    assert out.size == sum(len(p) for p in out.pieces)
    return result


@pytest.mark.parametrize("scanned", [False, True])
def test_anthropic_messages_to_chat(scanned: bool) -> None:
    out = translated(ANTHROPIC, Shape.CHAT, scanned=scanned)
    assert out == {**CHAT, "model": "served"}


def test_chat_to_anthropic_messages() -> None:
    out = translated(CHAT, Shape.ANTHROPIC_MESSAGES)
    expected = {
        "model": "served",
        "max_tokens": 100,
        "stream": True,
        "system": "Be brief.",
        "stop_sequences": ["END"],
        "metadata": {"user_id": "u1"},
        "tools": [{"name": "weather", "input_schema": SCHEMA, "description": "d"}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "AAA"},
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                    {"type": "text", "text": "Weather?"},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}},
                ],
            },
            {  # the turn after the tool results joins them, as Anthropic expects
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "sunny"},
                    {"type": "text", "text": "And tomorrow?"},
                ],
            },
        ],
    }
    assert out == expected


def test_chat_without_a_limit_gets_anthropics_required_max_tokens() -> None:
    doc = {"model": "m", "temperature": 1.7, "messages": [{"role": "user", "content": "Hi"}]}
    out = translated(doc, Shape.ANTHROPIC_MESSAGES)
    assert out == {
        "model": "served",
        "max_tokens": DEFAULT_MAX_TOKENS,
        "temperature": 1.0,  # Anthropic's range ends at 1
        "messages": [{"role": "user", "content": "Hi"}],
    }
    doc = {
        "model": "m",
        "max_completion_tokens": 7,
        "max_tokens": 9,
        "messages": [{"role": "user", "content": "Hi"}],
    }
    assert translated(doc, Shape.ANTHROPIC_MESSAGES)["max_tokens"] == 7


def test_consecutive_tool_results_share_one_user_turn() -> None:
    doc = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "Hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                    {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                ],
            },
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "tool", "tool_call_id": "b", "content": "2"},
        ],
    }
    turns = translated(doc, Shape.ANTHROPIC_MESSAGES)["messages"]
    assert len(turns) == 3
    assert [block["tool_use_id"] for block in turns[2]["content"]] == ["a", "b"]


def test_a_request_without_anything_to_translate_keeps_its_untouched_bytes() -> None:
    doc = {"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]}
    data = json.dumps(doc).encode()
    body = whole_body(data)
    request = parse_request(body, path="/v1/messages")
    out = rewrite(body, request, RewritePlan(model="m", sent_shape=Shape.CHAT))
    assert json.loads(b"".join(bytes(p) for p in out.pieces)) == doc


def test_untranslatable_parts_are_refused() -> None:
    doc = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}],
            }
        ],
    }
    data = json.dumps(doc).encode()
    body = whole_body(data)
    with pytest.raises(Untranslatable, match="input_audio"):
        rewrite(body, parse_request(body), RewritePlan(sent_shape=Shape.ANTHROPIC_MESSAGES))


def test_a_huge_member_is_loaded_for_the_translation_up_to_the_limit() -> None:
    big = "x" * (2 * 1024 * 1024)  # over the strict-parse size: a LargeValue at Pick
    doc = {
        "model": "m",
        "max_tokens": 3,
        "system": "s",
        "messages": [{"role": "user", "content": big}],
    }
    out = translated(doc, Shape.CHAT, scanned=True)
    assert out["messages"] == [{"role": "system", "content": "s"}, {"role": "user", "content": big}]
    huge = {**doc, "messages": [{"role": "user", "content": "x" * (MAX_TRANSLATED_BYTES + 1)}]}
    data = json.dumps(huge).encode()
    body = scanned_body(data)
    with pytest.raises(Untranslatable, match="limit"):
        rewrite(body, parse_request(body), RewritePlan(sent_shape=Shape.CHAT))

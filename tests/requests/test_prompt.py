"""Prompt extraction: segment order, media by reference, token estimate, hint, limits."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kinference.requests.digest import text_digest
from kinference.requests.prompt import (
    MEDIA_TOKENS,
    MESSAGE_OVERHEAD_TOKENS,
    REQUEST_OVERHEAD_TOKENS,
)
from tests.requests import parse_both as parse
from tests.requests.samples import (
    ANTHROPIC_DOCUMENTS,
    ANTHROPIC_IMAGE,
    ANTHROPIC_TOOLS,
    B64_IMAGE,
    CHAT_AUDIO,
    CHAT_IMAGE,
    CHAT_LEGACY,
    CHAT_TOOLS,
    COMPLETION_TOKENS,
    IMAGE_URL,
    RESPONSES_FOLLOW_UP,
    RESPONSES_INSTRUCTIONS,
    RESPONSES_REASONING,
    RESPONSES_TOOLS,
    SAMPLES,
)


def segments(doc: dict[str, Any]) -> tuple[str, ...]:
    request = parse(doc)
    assert request.prompt.complete, request.prompt.reason
    return request.prompt.segments


# --- order -----------------------------------------------------------------------------------


def test_chat_order_is_leading_system_then_tools_then_conversation() -> None:
    got = segments(CHAT_TOOLS)
    assert got[0] == "system: You answer weather questions."
    assert got[1].startswith('tools: [{"function":{"description":')  # canonical: sorted keys
    assert got[2:] == (
        "user: What is the weather like in Boston today?",
        'assistant: <tool_call get_current_weather>{"location": "Boston, MA"}',
        'tool: {"temperature": 22}',
    )


def test_a_late_system_message_stays_in_place() -> None:
    doc = {
        "model": "m",
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "messages": [
            {"role": "user", "content": "a"},
            {"role": "system", "content": "b"},
        ],
    }
    assert segments(doc) == (
        'tools: [{"function":{"name":"f"},"type":"function"}]',
        "user: a",
        "system: b",
    )


def test_tools_are_canonical_json_whatever_the_key_order() -> None:
    tools = CHAT_TOOLS["tools"]
    reordered = [{key: tool[key] for key in reversed(tool)} for tool in tools]
    assert segments({**CHAT_TOOLS, "tools": reordered}) == segments(CHAT_TOOLS)


def test_responses_order() -> None:
    assert segments(RESPONSES_INSTRUCTIONS) == (
        "system: You are a coding assistant that talks like a pirate.",
        "user: Are semicolons optional in JavaScript?",
    )
    got = segments(RESPONSES_TOOLS)
    assert got[0].startswith('tools: [{"name":"get_weather"')
    assert got[1:] == (
        "user: What's the weather in Paris?",
        'assistant: <tool_call get_weather>{"location":"Paris"}',
        'tool: {"temperature": 14}',
    )


def test_anthropic_order_system_tools_messages() -> None:
    doc = {**ANTHROPIC_TOOLS, "system": [{"type": "text", "text": "Be terse."}]}
    got = segments(doc)
    assert got[0] == "system: Be terse."
    assert got[1].startswith('tools: [{"description":')
    assert got[2:] == (
        "user: What's the weather like in San Francisco?",
        "assistant: I'll check the weather.\n"
        '<tool_use get_weather>{"location":"San Francisco, CA"}',
        "user: <tool_result>\n15 degrees",
    )


def test_completion_and_embedding_inputs() -> None:
    assert segments(COMPLETION_TOKENS) == ("<tokens:1 2 3>", "<tokens:4 5>")
    assert segments({"model": "m", "prompt": [7, 8]}) == ("<tokens:7 8>",)
    assert segments({"model": "m", "input": ["a", [1]]}) == ("a", "<tokens:1>")
    assert segments({"model": "m", "prompt": []}) == ()


def test_extending_a_conversation_extends_its_segments() -> None:
    short = segments(CHAT_TOOLS)
    longer = copy.deepcopy(CHAT_TOOLS)
    longer["messages"].append({"role": "assistant", "content": "It is 22 degrees."})
    assert segments(longer)[: len(short)] == short


# --- multimodal by reference -----------------------------------------------------------------


def test_images_by_reference() -> None:
    data_url = "data:image/jpeg;base64," + B64_IMAGE
    (segment,) = segments(CHAT_IMAGE)
    assert segment == (
        f"user: What is in this image?\n<image:{IMAGE_URL}>\n<image:{text_digest(data_url)}>"
    )
    assert B64_IMAGE[:100] not in segment
    (segment,) = segments(ANTHROPIC_IMAGE)
    assert segment == f"user: <image:{text_digest(B64_IMAGE)}>\nDescribe this image."


def test_audio_and_file_parts_by_reference() -> None:
    (segment,) = segments(CHAT_AUDIO)
    audio = CHAT_AUDIO["messages"][0]["content"][1]["input_audio"]["data"]
    assert segment == (
        "user: What is in this recording?\n"
        f"<audio:{text_digest(audio)}>\n<file:id:file-6F2ksmvXxt4VdoqmHRw6kL>"
    )


def test_reference_digest_reads_the_ends_only() -> None:
    a = "data:image/png;base64," + "A" * 100_000
    b = "data:image/png;base64," + "A" * 50_000 + "B" + "A" * 49_999
    c = "data:image/png;base64," + "A" * 100_001
    assert text_digest(a) == text_digest(b)  # same length and ends: by design
    assert text_digest(a) != text_digest(c)  # the length is part of it
    assert str(text_digest("x")).startswith("1:")


def test_long_urls_are_digested() -> None:
    url = "https://example.com/" + "a" * 5000
    doc = {"model": "m", "messages": [{"role": "user", "content": [_image(url)]}]}
    assert segments(doc) == (f"user: <image:{text_digest(url)}>",)


def test_long_text_by_reference() -> None:
    text = "word " * 20_000  # 100 KB
    doc = {"model": "m", "messages": [{"role": "user", "content": text}]}
    assert segments(doc) == (f"user: <text:{text_digest(text)}>",)
    short = "é" * 30_000  # 30,000 characters, 60,000 bytes of UTF-8: short
    doc = {"model": "m", "messages": [{"role": "user", "content": short}]}
    assert segments(doc) == (f"user: {short}",)
    long = "é" * 40_000  # 80,000 bytes of UTF-8: long, though only 40,000 characters
    doc = {"model": "m", "messages": [{"role": "user", "content": long}]}
    assert segments(doc) == (f"user: <text:{text_digest(long)}>",)


def test_unknown_parts_are_canonical_json() -> None:
    part = {"type": "video_clip", "z": 1, "a": [2]}
    doc = {"model": "m", "messages": [{"role": "user", "content": [part]}]}
    assert segments(doc) == ('user: {"a":[2],"type":"video_clip","z":1}',)
    doc = {"model": "m", "messages": [{"role": "user", "content": [_image("x", "video_url")]}]}
    assert segments(doc) == (f"user: <video:{text_digest('x')}>",)


def _image(url: str, kind: str = "image_url") -> dict[str, Any]:
    return {"type": kind, kind: {"url": url}}


# --- stored state ----------------------------------------------------------------------------


def test_previous_response_makes_the_prompt_incomplete() -> None:
    request = parse(RESPONSES_FOLLOW_UP)
    assert not request.prompt.complete
    assert "previous_response_id" in request.prompt.reason
    assert request.prompt.segments == (
        "previous_response: <previous_response:resp_68af4030592c81938ec0a5fbab4a3e9f>",
        "user: explain why this is funny.",
    )


def test_conversation_object() -> None:
    request = parse({"model": "m", "conversation": {"id": "conv_1"}, "input": "hi"})
    assert request.prompt.segments == ("conversation: <conversation:conv_1>", "user: hi")
    assert not request.prompt.complete


# --- token estimate --------------------------------------------------------------------------


def test_token_estimate_of_text_is_about_four_chars_per_token() -> None:
    text = "x" * 4000
    request = parse({"model": "m", "messages": [{"role": "user", "content": text}]})
    assert request.token_estimate == 1000 + MESSAGE_OVERHEAD_TOKENS + REQUEST_OVERHEAD_TOKENS
    request = parse({"model": "m", "prompt": text})
    assert request.token_estimate == 1000 + REQUEST_OVERHEAD_TOKENS


def test_token_estimate_counts_media_as_a_fixed_cost() -> None:
    small = {"model": "m", "messages": [{"role": "user", "content": [_image("a")]}]}
    big = {"model": "m", "messages": [{"role": "user", "content": [_image("a" * 500_000)]}]}
    assert parse(small).token_estimate == parse(big).token_estimate
    assert parse(small).token_estimate >= MEDIA_TOKENS["image"]


def test_token_estimate_counts_token_ids_and_long_text() -> None:
    assert parse({"model": "m", "prompt": list(range(500))}).token_estimate == 503
    long = "y" * 400_000
    estimate = parse({"model": "m", "prompt": long}).token_estimate
    assert estimate == 100_000 + REQUEST_OVERHEAD_TOKENS


@pytest.mark.parametrize("name", list(SAMPLES))
def test_token_estimate_is_sane_for_every_sample(name: str) -> None:
    doc, _ = SAMPLES[name]
    request = parse(doc)
    text = sum(len(segment) for segment in request.prompt.segments)
    assert REQUEST_OVERHEAD_TOKENS < request.token_estimate < text + 10_000


def test_anthropic_documents_thinking_and_files() -> None:
    pdf = ANTHROPIC_DOCUMENTS["messages"][0]["content"][0]["source"]["data"]
    redacted = ANTHROPIC_DOCUMENTS["messages"][1]["content"][1]["data"]
    assert segments(ANTHROPIC_DOCUMENTS) == (
        f"user: <file:{text_digest(pdf)}>\nGrass is green.\n<file:https://example.com/a.pdf>\n"
        "<image:id:file_011CNha8iCJcU1w>\nSummarize these.",
        f"assistant: Let me read them.\n<redacted_thinking:{text_digest(redacted)}>\n"
        "Here is a summary.",
        "user: Thanks",
    )


def test_responses_items() -> None:
    data = RESPONSES_REASONING["input"][0]["content"][1]["file_data"]
    assert segments(RESPONSES_REASONING) == (
        f"user: Read this file\n<file:{text_digest(data)}>\n<file:id:file-6F2ksmvXxt4VdoqmHRw6kL>",
        "reasoning: Reading the file.",
        "assistant: Done.",
        "assistant: <tool_call code_exec>print(1)",
        "tool: 1",
        "reference: <item:msg_123>",
        'web_search_call: {"id":"ws_1","status":"completed","type":"web_search_call"}',
    )


def test_legacy_functions() -> None:
    request = parse(CHAT_LEGACY)
    assert request.has_tools
    assert request.prompt.segments == (
        'functions: [{"name":"get_weather","parameters":{"type":"object"}}]',
        "user: Weather?",
        "assistant: <tool_call get_weather>{}",
        "function: sunny",
        "assistant: I can't.",
    )

"""Which API a body was written for: from the client's path when the caller sent it, else
from the body alone.

A caller may send the client's request path with PushBody (call metadata
`kinference-request-path`, an optional protocol extension). A path ending in one of the
APIs' endpoints (`/chat/completions`, `/completions`, `/embeddings`, `/responses`,
`/messages`; any prefix, no query) decides the shape, and the body must carry that shape's
deciding field (`messages`; `prompt`; `input`; `input` or `prompt`; `messages`). Any other
path, or none, leaves it to the body. Body rules, in order:

1. `messages` present (an array) → a conversation:
   - **ANTHROPIC_MESSAGES** when the body carries a sign only Anthropic's Messages API has:
     a top-level `system`, `anthropic_version`, `anthropic_beta`, `stop_sequences` or
     `thinking`; a tool with `input_schema`; a `tool_choice` object of type auto, any, tool
     or none; a content block of type image, document, tool_use, tool_result, thinking,
     redacted_thinking, search_result, server_tool_use or web_search_tool_result. `top_k`
     alone is a weak sign (vLLM and SGLang accept it on chat completions): it counts only
     when no OpenAI-only sign is present (a system, developer or tool role, `tool_calls`,
     an image_url, input_audio or file part, or an OpenAI-only field such as
     `max_completion_tokens`, `stream_options`, `response_format`, `n`, `logprobs`).
   - **CHAT** (OpenAI chat completions) otherwise. `{"model", "max_tokens", "messages":
     [{"role": "user", "content": "Hi"}]}` is valid for both APIs and reads as CHAT; both
     read their prompt the same way.
2. `prompt` present: an object is a stored prompt template of the Responses API →
   **RESPONSES**; otherwise (a string or an array) → **COMPLETION** (OpenAI completions).
3. `input` present (a string or an array):
   - **RESPONSES** when the array holds objects (message or other items), which embeddings
     input never does;
   - **EMBEDDINGS** when an embeddings-only field is present (`encoding_format`,
     `dimensions`);
   - **RESPONSES** when a responses-only field is present (`instructions`,
     `max_output_tokens`, `previous_response_id`, `reasoning`, `text`, `tools`, `stream`,
     ... see `_RESPONSES_FIELDS`);
   - **EMBEDDINGS** otherwise: plain input (strings or token ids). `{"model", "input": "Hi"}`
     is also a valid responses request; its prompt reads the same either way.
4. none of them → MalformedRequest.

Only the type of the deciding field is checked here; the extractors check the rest.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from kinference.requests.checks import expect
from kinference.requests.fields import LargeValue, MalformedRequest


class Shape(enum.Enum):
    """The API a body was written for, told apart by its fields."""

    CHAT = "chat"  # OpenAI chat completions
    COMPLETION = "completion"  # OpenAI (legacy) completions
    EMBEDDINGS = "embeddings"  # OpenAI embeddings
    RESPONSES = "responses"  # OpenAI responses
    ANTHROPIC_MESSAGES = "anthropic_messages"  # Anthropic messages


_ANTHROPIC_FIELDS = frozenset(
    {"system", "anthropic_version", "anthropic_beta", "stop_sequences", "thinking"}
)
_ANTHROPIC_BLOCKS = frozenset(
    {
        "image",
        "document",
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
        "search_result",
        "server_tool_use",
        "web_search_tool_result",
    }
)
_ANTHROPIC_TOOL_CHOICES = frozenset({"auto", "any", "tool", "none"})
_OPENAI_FIELDS = frozenset(
    {
        "max_completion_tokens",
        "stream_options",
        "response_format",
        "n",
        "logprobs",
        "top_logprobs",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "seed",
        "functions",
        "function_call",
        "parallel_tool_calls",
    }
)
_OPENAI_ROLES = frozenset({"system", "developer", "tool", "function"})
_OPENAI_PARTS = frozenset({"image_url", "input_audio", "file", "refusal"})
_EMBEDDINGS_FIELDS = frozenset({"encoding_format", "dimensions"})
_RESPONSES_FIELDS = frozenset(
    {
        "instructions",
        "max_output_tokens",
        "previous_response_id",
        "reasoning",
        "text",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "stream",
        "store",
        "include",
        "background",
        "conversation",
        "truncation",
        "temperature",
        "top_p",
        "metadata",
        "prompt_cache_key",
        "safety_identifier",
        "service_tier",
        "top_logprobs",
        "max_tool_calls",
    }
)


# Endpoint suffixes and the shape each one is, longest first: "/chat/completions" before
# "/completions".
_PATH_SHAPES = (
    ("/chat/completions", Shape.CHAT),
    ("/completions", Shape.COMPLETION),
    ("/embeddings", Shape.EMBEDDINGS),
    ("/responses", Shape.RESPONSES),
    ("/messages", Shape.ANTHROPIC_MESSAGES),
)
MAX_PATH_CHARS = 2048  # a longer path hint is ignored (body detection decides)


def path_shape(path: str) -> Shape | None:
    """The shape a client path names, or None for any other path (or none)."""
    if not path or len(path) > MAX_PATH_CHARS:
        return None
    bare = path.partition("?")[0].rstrip("/")
    for suffix, shape in _PATH_SHAPES:
        if bare.endswith(suffix):
            return shape
    return None


def classify(values: Mapping[str, Any], path: str = "") -> Shape:
    """The shape of a request from its path hint, if any, and its top-level fields; raises
    MalformedRequest."""
    named = path_shape(path)
    if named is not None:
        return _as_named(values, named)
    if "messages" in values:
        expect(values["messages"], "messages", (list,), "an array")
        return Shape.ANTHROPIC_MESSAGES if _is_anthropic(values) else Shape.CHAT
    if "prompt" in values:
        if _is_object(values["prompt"]):
            return Shape.RESPONSES
        expect(values["prompt"], "prompt", (str, list), "a string or an array")
        return Shape.COMPLETION
    if "input" in values:
        expect(values["input"], "input", (str, list), "a string or an array")
        return _input_shape(values)
    raise MalformedRequest('no "messages", "prompt" or "input": not an inference request')


def _as_named(values: Mapping[str, Any], shape: Shape) -> Shape:
    """`shape`, once the body has the field that shape reads its prompt from."""
    if shape in (Shape.CHAT, Shape.ANTHROPIC_MESSAGES):
        if "messages" not in values:
            raise MalformedRequest(f'a {shape.value} request needs "messages"')
        expect(values["messages"], "messages", (list,), "an array")
    elif shape is Shape.COMPLETION:
        if "prompt" not in values:
            raise MalformedRequest('a completion request needs "prompt"')
        expect(values["prompt"], "prompt", (str, list), "a string or an array")
    elif shape is Shape.EMBEDDINGS:
        if "input" not in values:
            raise MalformedRequest('an embeddings request needs "input"')
        expect(values["input"], "input", (str, list), "a string or an array")
    elif "input" not in values and "prompt" not in values:
        raise MalformedRequest('a responses request needs "input" or "prompt"')
    return shape


def _is_object(value: object) -> bool:
    return isinstance(value, dict) or (isinstance(value, LargeValue) and value.first_byte == "{")


def _is_anthropic(values: Mapping[str, Any]) -> bool:
    if not _ANTHROPIC_FIELDS.isdisjoint(values):
        return True
    if _has_input_schema(values.get("tools")) or _anthropic_tool_choice(values.get("tool_choice")):
        return True
    messages = values["messages"]
    if isinstance(messages, list) and any(_block_types(messages) & _ANTHROPIC_BLOCKS):
        return True
    return "top_k" in values and not _has_openai_sign(values)


def _has_input_schema(tools: object) -> bool:
    return isinstance(tools, list) and any(
        isinstance(tool, dict) and "input_schema" in tool for tool in tools
    )


def _anthropic_tool_choice(choice: object) -> bool:
    kind = choice.get("type") if isinstance(choice, dict) else None
    return isinstance(kind, str) and kind in _ANTHROPIC_TOOL_CHOICES


def _has_openai_sign(values: Mapping[str, Any]) -> bool:
    if not _OPENAI_FIELDS.isdisjoint(values):
        return True
    messages = values["messages"]
    if not isinstance(messages, list):
        return False
    for message in messages:
        if isinstance(message, dict):
            role = message.get("role")
            if "tool_calls" in message or (isinstance(role, str) and role in _OPENAI_ROLES):
                return True
    return bool(_block_types(messages) & _OPENAI_PARTS)


def _block_types(messages: list[Any]) -> set[str]:
    """The `type` of every content block of every message."""
    types: set[str] = set()
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            for block in content:
                kind = block.get("type") if isinstance(block, dict) else None
                if isinstance(kind, str):
                    types.add(kind)
    return types


def _input_shape(values: Mapping[str, Any]) -> Shape:
    given = values["input"]
    if isinstance(given, list) and any(isinstance(item, dict) for item in given):
        return Shape.RESPONSES
    if not _EMBEDDINGS_FIELDS.isdisjoint(values):
        return Shape.EMBEDDINGS
    if not _RESPONSES_FIELDS.isdisjoint(values):
        return Shape.RESPONSES
    return Shape.EMBEDDINGS

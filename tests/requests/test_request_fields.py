"""The request fields besides the prompt: max output tokens, tools, hint; malformed parts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kinference.requests import MalformedRequest, parse_request
from tests.requests import parse_both as parse
from tests.requests import scanned_body, whole_body
from tests.requests.samples import (
    ANTHROPIC_TOOLS,
    CHAT_IMAGE,
    CHAT_TOOLS,
    RESPONSES_TOOLS,
)


def test_max_output_tokens_and_tools() -> None:
    assert parse(CHAT_TOOLS).max_output_tokens == 512
    assert parse(CHAT_TOOLS).has_tools
    assert parse(RESPONSES_TOOLS).max_output_tokens == 1024
    assert parse(ANTHROPIC_TOOLS).max_output_tokens == 1024
    assert not parse(CHAT_IMAGE).has_tools
    both = {"model": "m", "prompt": "p", "max_tokens": 5, "max_completion_tokens": 9}
    assert parse(both).max_output_tokens == 9
    assert parse({"model": "m", "prompt": "p", "max_tokens": None}).max_output_tokens is None
    assert not parse({"model": "m", "input": "p", "tools": []}).has_tools
    assert parse({"model": "m", "messages": [], "functions": [{"name": "f"}]}).has_tools


def test_hint() -> None:
    doc = {"model": "m", "prompt": "p", "kinference": {"hint": "small-and-fast"}}
    assert parse(doc).hint == "small-and-fast"
    assert parse({"model": "m", "prompt": "p", "kinference": {}}).hint is None
    assert parse({"model": "m", "prompt": "p"}).hint is None


BAD: list[tuple[dict[str, Any], str]] = [
    ({"kinference": "x"}, '"kinference" must be an object'),
    ({"kinference": {"hint": "a", "pool": "b"}}, "may hold only \"hint\", not 'pool'"),
    ({"kinference": {"hint": 3}}, '"kinference.hint" must be a string, got a number'),
    ({"kinference": {"hint": " "}}, '"kinference.hint" is empty'),
    ({"max_tokens": -1}, '"max_tokens" must be an integer >= 0, got a number'),
    ({"max_completion_tokens": 1.5}, '"max_completion_tokens" must be an integer'),
    ({"max_output_tokens": "9"}, '"max_output_tokens" must be an integer >= 0, got a string'),
    ({"max_tokens": True}, "got a boolean"),
    ({"stream_options": []}, '"stream_options" must be an object, got an array'),
]


@pytest.mark.parametrize(("extra", "reason"), BAD)
def test_malformed_extras(extra: dict[str, Any], reason: str) -> None:
    data = json.dumps({"model": "m", "prompt": "p", **extra}).encode()
    for body in (whole_body(data), scanned_body(data)):
        with pytest.raises(MalformedRequest) as caught:
            parse_request(body)
        assert reason in str(caught.value)


def msgs(*messages: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages)}


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        (msgs("hi"), '"messages[0]" must be an object, got a string'),
        (msgs({"content": "x"}), '"messages[0].role" must be a string, got null'),
        (msgs({"role": "user", "content": 1}), '"messages[0].content" must be a string, an'),
        (msgs({"role": "user", "content": [1]}), '"messages[0].content[0]" must be an object'),
        (msgs({"role": "user", "content": [{}]}), '"messages[0].content[0].type" must be a'),
        (
            msgs({"role": "user", "content": [{"type": "text", "text": 5}]}),
            '"messages[0].content[0].text" must be a string, got a number',
        ),
        (
            msgs({"role": "user", "content": [{"type": "image_url", "image_url": {}}]}),
            '"messages[0].content[0].image_url.url" must be a string, got null',
        ),
        (
            msgs({"role": "assistant", "tool_calls": [{"function": {"name": 1}}]}),
            '"messages[0].tool_calls[0].function.name" must be a string',
        ),
        (
            {**msgs({"role": "user", "content": [{"type": "image", "source": 3}]}), "top_k": 1},
            '"messages[0].content[0].source" must be an object, got a number',
        ),
        ({"model": "m", "input": [{"type": "message"}]}, '"input[0].role" must be a string'),
        ({"model": "m", "input": [{"type": 5}]}, '"input[0].type" must be a string'),
        ({"model": "m", "input": ["a", {"role": "user"}]}, '"input[0]" must be an object'),
        ({"model": "m", "input": [1, "a"]}, '"input[1]" must be a token id'),
        ({"model": "m", "input": [[1, "a"]]}, '"input[0][1]" must be a token id'),
        ({"model": "m", "prompt": [None]}, '"prompt[0]" must be a string or an array'),
        ({"model": "m", "tools": {}, "input": "x"}, '"tools" must be an array, got an object'),
        ({"model": "m", "system": 5, "messages": []}, '"system" must be a string or an array'),
        ({"model": "m", "instructions": 5, "input": "x"}, '"instructions" must be a string'),
    ],
)
def test_malformed_parts_name_their_path(doc: dict[str, Any], reason: str) -> None:
    data = json.dumps(doc).encode()
    for body in (whole_body(data), scanned_body(data)):
        with pytest.raises(MalformedRequest) as caught:
            parse_request(body)
        assert reason in str(caught.value)

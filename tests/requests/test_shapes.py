"""Request shapes, told from the body alone: documented examples and the rules' edge cases."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kinference.requests import MalformedRequest, Shape, parse_request
from tests.requests import scanned_body, whole_body
from tests.requests.samples import SAMPLES


def shape_of(doc: dict[str, Any]) -> Shape:
    """The shape, which must be the same parsed whole and scanned."""
    data = json.dumps(doc).encode()
    shape = parse_request(whole_body(data)).shape
    assert parse_request(scanned_body(data)).shape is shape
    return shape


@pytest.mark.parametrize("name", list(SAMPLES))
def test_documented_examples(name: str) -> None:
    doc, expected = SAMPLES[name]
    assert shape_of(doc) is expected


def base(**fields: Any) -> dict[str, Any]:
    return {"model": "m", **fields}


USER = [{"role": "user", "content": "Hi"}]


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        # Valid for both chat and Anthropic: read as chat.
        (base(max_tokens=1024, messages=USER), Shape.CHAT),
        (base(messages=USER, system="Be brief"), Shape.ANTHROPIC_MESSAGES),
        (base(messages=USER, system=[{"type": "text", "text": "x"}]), Shape.ANTHROPIC_MESSAGES),
        (base(messages=USER, anthropic_version="bedrock-2023-05-31"), Shape.ANTHROPIC_MESSAGES),
        (base(messages=USER, stop_sequences=["END"]), Shape.ANTHROPIC_MESSAGES),
        (base(messages=USER, thinking={"type": "enabled"}), Shape.ANTHROPIC_MESSAGES),
        (base(messages=USER, tool_choice={"type": "any"}), Shape.ANTHROPIC_MESSAGES),
        (base(messages=USER, tool_choice={"type": "function"}), Shape.CHAT),
        (base(messages=USER, tool_choice="auto"), Shape.CHAT),
        (base(messages=USER, tools=[{"name": "f", "input_schema": {}}]), Shape.ANTHROPIC_MESSAGES),
        # top_k is weak: vLLM takes it on chat completions.
        (base(messages=USER, top_k=5), Shape.ANTHROPIC_MESSAGES),
        (base(messages=USER, top_k=5, seed=1), Shape.CHAT),
        (base(messages=[{"role": "system", "content": "s"}, *USER], top_k=5), Shape.CHAT),
        (
            base(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": "u"}]}]),
            Shape.CHAT,
        ),
        (
            base(
                messages=[{"role": "user", "content": [{"type": "image_url", "image_url": "u"}]}],
                top_k=3,
            ),
            Shape.CHAT,
        ),
        (
            base(messages=[{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]),
            Shape.ANTHROPIC_MESSAGES,
        ),
        # prompt: completion, unless it is a Responses prompt template.
        (base(prompt="p"), Shape.COMPLETION),
        (base(prompt=[[1, 2]]), Shape.COMPLETION),
        (base(prompt={"id": "pmpt_1", "variables": {"a": "b"}}), Shape.RESPONSES),
        (base(prompt={"id": "pmpt_1"}, input="hi"), Shape.RESPONSES),
        # input: items mean responses; then embeddings fields; then responses fields.
        (base(input="hi"), Shape.EMBEDDINGS),
        (base(input=["a", "b"]), Shape.EMBEDDINGS),
        (base(input=[[1, 2], [3]]), Shape.EMBEDDINGS),
        (base(input="hi", user="u1"), Shape.EMBEDDINGS),
        (base(input="hi", dimensions=8), Shape.EMBEDDINGS),
        (base(input="hi", dimensions=8, stream=False), Shape.EMBEDDINGS),
        (base(input=[{"role": "user", "content": "x"}], dimensions=8), Shape.RESPONSES),
        (base(input="hi", instructions="be nice"), Shape.RESPONSES),
        (base(input="hi", max_output_tokens=5), Shape.RESPONSES),
        (base(input="hi", previous_response_id="resp_1"), Shape.RESPONSES),
        (base(input="hi", reasoning={"effort": "low"}), Shape.RESPONSES),
        (base(input="hi", text={"format": {"type": "text"}}), Shape.RESPONSES),
        (base(input="hi", tools=[]), Shape.RESPONSES),
        (base(input="hi", stream=True), Shape.RESPONSES),
        (base(input=[]), Shape.EMBEDDINGS),
        # messages beat prompt, prompt beats input.
        (base(messages=USER, prompt="p", input="i"), Shape.CHAT),
        (base(prompt="p", input="i"), Shape.COMPLETION),
    ],
)
def test_rules(doc: dict[str, Any], expected: Shape) -> None:
    assert shape_of(doc) is expected


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        (base(), 'no "messages", "prompt" or "input"'),
        (base(messages="hi"), '"messages" must be an array, got a string'),
        (base(prompt=True), '"prompt" must be a string or an array, got a boolean'),
        (base(input=3), '"input" must be a string or an array, got a number'),
        (base(input=None), '"input" must be a string or an array, got null'),
    ],
)
def test_deciding_field_of_the_wrong_type(doc: dict[str, Any], reason: str) -> None:
    data = json.dumps(doc).encode()
    for body in (whole_body(data), scanned_body(data)):
        with pytest.raises(MalformedRequest, match=reason):
            parse_request(body)


def test_odd_type_values_do_not_confuse_the_signs() -> None:
    # Unhashable "type" and "role" values must not raise while looking for signs.
    doc = base(
        messages=[{"role": ["x"], "content": [{"type": {"a": 1}}]}],
        top_k=1,
        tools=[["input_schema"]],
        tool_choice={"type": ["any"]},
    )
    with pytest.raises(MalformedRequest):
        parse_request(whole_body(json.dumps(doc).encode()))

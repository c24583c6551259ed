"""Recognise an inference request from its body alone (the picker never sees the path).

`parse_request` reads the top-level fields (`fields`), loads huge prompt fields through their
skeleton (`large`), tells the shape (`shapes`), and extracts the prompt and token estimate
(`extract`). Whatever the bytes, the only exception it raises is `MalformedRequest`.
"""

from __future__ import annotations

from typing import Any

from kinference.bodies import Body
from kinference.records import record
from kinference.requests.checks import json_type, wrong
from kinference.requests.extract import extract_prompt, has_tools, load_prompt_fields
from kinference.requests.fields import Fields, LargeValue, MalformedRequest, read_fields
from kinference.requests.prompt import Prompt
from kinference.requests.shapes import Shape, classify

HINT_FIELD = "kinference"  # our own top-level member: {"hint": "..."}; never forwarded
MAX_TOKENS_FIELDS = ("max_completion_tokens", "max_output_tokens", "max_tokens")  # precedence


@record
class InferenceRequest:
    """What routing needs to know about a request, and the fields to rewrite it with.

    `max_output_tokens` is the first of max_completion_tokens, max_output_tokens and
    max_tokens that is set; `hint` is the client's explicit routing hint, if any.
    """

    model: str
    shape: Shape
    stream: bool
    fields: Fields
    prompt: Prompt
    token_estimate: int
    has_tools: bool
    max_output_tokens: int | None
    hint: str | None

    def usage_asked(self) -> bool:
        """A streamed request whose `stream_options.include_usage` is true."""
        options = self.fields.values.get("stream_options")
        return self.stream and isinstance(options, dict) and options.get("include_usage") is True


def parse_request(body: Body, path: str = "") -> InferenceRequest:
    """Read an inference request; raises MalformedRequest naming what is wrong. `path` is
    the client's request path when the caller sent it: it decides the shape it names."""
    fields = read_fields(body)
    model = _model(fields.values.get("model"))
    loaded = load_prompt_fields(body, fields)
    shape = classify(loaded.values, path)
    stream = _stream(fields.values.get("stream"))
    max_output_tokens = _max_output_tokens(fields.values)
    hint = _hint(fields.values.get(HINT_FIELD))
    _check_stream_options(fields.values.get("stream_options"))
    prompt, estimate = extract_prompt(shape, loaded)
    return InferenceRequest(
        model=model,
        shape=shape,
        stream=stream,
        fields=fields,
        prompt=prompt,
        token_estimate=estimate,
        has_tools=has_tools(loaded.values),
        max_output_tokens=max_output_tokens,
        hint=hint,
    )


def _model(value: object) -> str:
    if value is None:
        raise MalformedRequest('missing "model": not an inference request')
    if isinstance(value, LargeValue) and value.first_byte == '"':
        raise MalformedRequest('"model" is longer than any model name can be')
    if not isinstance(value, str):
        raise MalformedRequest(f'"model" must be a string, got {json_type(value)}')
    if not value.strip():
        raise MalformedRequest('"model" is empty')
    return value


def _stream(value: object) -> bool:
    if value is None:  # absent, or null as the OpenAI API allows: not streaming
        return False
    if not isinstance(value, bool):
        raise MalformedRequest(f'"stream" must be true or false, got {json_type(value)}')
    return value


def _max_output_tokens(values: dict[str, Any]) -> int | None:
    found: int | None = None
    for name in MAX_TOKENS_FIELDS:
        value = values.get(name)
        if value is None:
            continue
        if type(value) is not int or value < 0:
            wrong(name, "an integer >= 0", value)
        if found is None:
            found = value
    return found


def _hint(value: object) -> str | None:
    """The routing hint of `{"kinference": {"hint": "..."}}`; nothing else may be there."""
    if value is None:
        return None
    if isinstance(value, LargeValue):
        raise MalformedRequest(f'"{HINT_FIELD}" is larger than a routing hint can be')
    if not isinstance(value, dict):
        wrong(HINT_FIELD, 'an object like {"hint": "..."}', value)
    for key in value:
        if key != "hint":
            raise MalformedRequest(f'"{HINT_FIELD}" may hold only "hint", not {key[:40]!r}')
    hint = value.get("hint")
    if hint is None:
        return None
    if not isinstance(hint, str):
        wrong(f"{HINT_FIELD}.hint", "a string", hint)
    if not hint.strip():
        raise MalformedRequest(f'"{HINT_FIELD}.hint" is empty')
    return hint


def _check_stream_options(value: object) -> None:
    """A rewrite may set `include_usage` inside it: it must be an object (or null)."""
    if isinstance(value, LargeValue):
        raise MalformedRequest('"stream_options" is larger than stream options can be')
    if value is not None and not isinstance(value, dict):
        wrong("stream_options", "an object", value)

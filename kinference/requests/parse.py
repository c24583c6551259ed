"""Recognise an inference request from its body alone (the picker never sees the path)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kinference.bodies import Body
from kinference.requests.fields import Fields, LargeValue, MalformedRequest, read_fields


class Shape(enum.Enum):
    """The API a body was written for, told apart by its fields."""

    CHAT = "chat"  # OpenAI chat completions: "messages"
    COMPLETION = "completion"  # OpenAI completions: "prompt"
    INPUT = "input"  # OpenAI embeddings or responses: "input"


@dataclass(frozen=True, slots=True)
class InferenceRequest:
    """What routing needs to know about a request, and the fields to rewrite it with."""

    model: str
    shape: Shape
    stream: bool
    fields: Fields


def parse_request(body: Body) -> InferenceRequest:
    """Read an OpenAI-style request; raises MalformedRequest naming what is wrong."""
    fields = read_fields(body)
    values = fields.values
    return InferenceRequest(
        model=_model(values.get("model")),
        shape=_shape(values),
        stream=_stream(values.get("stream")),
        fields=fields,
    )


def _model(value: object) -> str:
    if value is None:
        raise MalformedRequest('missing "model": not an inference request')
    if isinstance(value, LargeValue) and value.first_byte == '"':
        raise MalformedRequest('"model" is longer than any model name can be')
    if not isinstance(value, str):
        raise MalformedRequest(f'"model" must be a string, got {_json_type(value)}')
    if not value.strip():
        raise MalformedRequest('"model" is empty')
    return value


def _shape(values: dict[str, object]) -> Shape:
    if "messages" in values:
        _expect(values["messages"], "messages", list, "an array")
        return Shape.CHAT
    if "prompt" in values:
        _expect(values["prompt"], "prompt", (str, list), "a string or an array")
        return Shape.COMPLETION
    if "input" in values:
        return Shape.INPUT
    raise MalformedRequest('no "messages", "prompt" or "input": not an inference request')


def _expect(value: object, name: str, kinds: type | tuple[type, ...], wanted: str) -> None:
    if isinstance(value, LargeValue):
        ok = value.first_byte == "[" or (value.first_byte == '"' and str in _as_tuple(kinds))
    else:
        ok = isinstance(value, kinds)
    if not ok:
        raise MalformedRequest(f'"{name}" must be {wanted}, got {_json_type(value)}')


def _as_tuple(kinds: type | tuple[type, ...]) -> tuple[type, ...]:
    return kinds if isinstance(kinds, tuple) else (kinds,)


def _stream(value: object) -> bool:
    if value is None:  # absent, or null as the OpenAI API allows: not streaming
        return False
    if not isinstance(value, bool):
        raise MalformedRequest(f'"stream" must be true or false, got {_json_type(value)}')
    return value


def _json_type(value: object) -> str:
    if isinstance(value, LargeValue):
        return {"{": "an object", "[": "an array", '"': "a string"}.get(value.first_byte, "a value")
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}
    names.update({list: "an array", dict: "an object", type(None): "null"})
    return names.get(type(value), type(value).__name__)

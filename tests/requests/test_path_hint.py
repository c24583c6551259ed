"""The client's path (PushBody metadata `kinference-request-path`) decides the shape it names."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kinference.requests import MalformedRequest, Shape, parse_request
from kinference.requests.shapes import MAX_PATH_CHARS, path_shape
from tests.requests import scanned_body, whole_body


def shape_at(doc: dict[str, Any], path: str) -> Shape:
    data = json.dumps(doc).encode()
    shape = parse_request(whole_body(data), path=path).shape
    assert parse_request(scanned_body(data), path=path).shape is shape
    return shape


MINIMAL_RESPONSES = {"model": "m", "input": "hi"}


def test_a_minimal_responses_call_is_responses_on_its_path() -> None:
    assert shape_at(MINIMAL_RESPONSES, "/v1/responses") is Shape.RESPONSES
    assert shape_at(MINIMAL_RESPONSES, "/v1/embeddings") is Shape.EMBEDDINGS
    assert shape_at(MINIMAL_RESPONSES, "") is Shape.EMBEDDINGS  # body alone: as before


@pytest.mark.parametrize(
    ("path", "shape"),
    [
        ("/v1/chat/completions", Shape.CHAT),
        ("/openai/deployments/x/chat/completions?api-version=2024-10-21", Shape.CHAT),
        ("/v1/completions", Shape.COMPLETION),
        ("/v1/embeddings/", Shape.EMBEDDINGS),
        ("/v1/responses", Shape.RESPONSES),
        ("/v1/messages", Shape.ANTHROPIC_MESSAGES),
        ("/v1/messages?beta=true", Shape.ANTHROPIC_MESSAGES),
        ("/v1/models", None),
        ("/", None),
        ("", None),
        ("/v1/" + "x" * MAX_PATH_CHARS + "/responses", None),  # too long: ignored
    ],
)
def test_path_shapes(path: str, shape: Shape | None) -> None:
    assert path_shape(path) is shape


def test_messages_path_reads_a_body_valid_for_both_apis_as_anthropic() -> None:
    doc = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}
    assert shape_at(doc, "") is Shape.CHAT
    assert shape_at(doc, "/v1/messages") is Shape.ANTHROPIC_MESSAGES


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({"model": "m", "input": "hi"}, "/v1/chat/completions"),
        ({"model": "m", "messages": "hi"}, "/v1/messages"),
        ({"model": "m", "messages": []}, "/v1/completions"),
        ({"model": "m", "prompt": "p"}, "/v1/embeddings"),
        ({"model": "m", "messages": []}, "/v1/responses"),
    ],
)
def test_a_body_without_its_paths_field_is_malformed(doc: dict[str, Any], path: str) -> None:
    with pytest.raises(MalformedRequest):
        parse_request(whole_body(json.dumps(doc).encode()), path=path)


def test_an_unknown_path_leaves_it_to_the_body() -> None:
    doc = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "system": "s"}
    assert shape_at(doc, "/custom/route") is Shape.ANTHROPIC_MESSAGES

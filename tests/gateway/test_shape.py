"""A token's event told by its shape: taken only where a parse would find the same document
but for the text (a content event), never where the parse would differ or fail."""

from __future__ import annotations

import json

import orjson
from hypothesis import given
from hypothesis import strategies as st

from kinference.gateway.shape import ContentShape, learned
from kinference.gateway.sse import json_object

PREFIX = b'{"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":'
SUFFIX = b'},"logprobs":null,"finish_reason":null}]}'
FIRST = PREFIX + b'"hello"' + SUFFIX


def shape() -> ContentShape:
    found = learned(FIRST, orjson.loads(FIRST))
    assert found is not None
    return found


def test_the_shape_is_the_bytes_around_the_delta_text() -> None:
    found = shape()
    assert (found.prefix, found.suffix) == (PREFIX, SUFFIX)


def test_no_shape_from_bytes_that_leave_doubt() -> None:
    doubtful = [
        PREFIX + b'"a\\nb"' + SUFFIX,  # an escape
        PREFIX + b'""' + SUFFIX,  # no text
        FIRST.replace(b'"model"', b'"content":"x","model"'),  # two content keys
        FIRST.replace(b'"id":"c1"', b'"usage":{"prompt_tokens":1}'),  # a usage
        FIRST.replace(b'"delta":{"content":', b'"delta":{"reasoning":"r","content":').replace(
            b'"hello"', b'""'
        ),
        b'{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}}]}',  # two choices
        b'{"choices":[{"message":{"content":"a"}}]}',  # not a delta
        b'{"choices":[{"delta":{"content": "a"}}]}',  # a space before the text
    ]
    for data in doubtful:
        document = json.loads(data)
        assert learned(data, document) is None, data


@given(st.text())
def test_a_text_encoded_plainly_matches_and_parses_to_it(text: str) -> None:
    literal = json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")
    data = PREFIX + literal + SUFFIX
    if shape().matches(data):
        document = json_object(data)
        assert document is not None
        assert document["choices"][0]["delta"]["content"] == text != ""
        assert document | {"choices": []} == orjson.loads(FIRST) | {"choices": []}


@given(st.binary(max_size=40))
def test_any_bytes_match_only_where_the_parse_finds_a_text(raw: bytes) -> None:
    data = PREFIX + b'"' + raw + b'"' + SUFFIX
    if shape().matches(data):
        document = json_object(data)
        assert document is not None, raw
        text = document["choices"][0]["delta"]["content"]
        assert isinstance(text, str) and text and text.encode() == raw


@given(st.binary(max_size=60))
def test_anything_around_the_text_matches_only_as_the_shape(noise: bytes) -> None:
    data = PREFIX + noise + SUFFIX
    if shape().matches(data):
        assert data.startswith(PREFIX + b'"') and data.endswith(b'"' + SUFFIX)
        assert json_object(data) is not None

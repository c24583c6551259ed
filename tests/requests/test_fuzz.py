"""Fuzzing: whatever the bytes, parse_request raises nothing but MalformedRequest.

Arbitrary bytes, byte-level corruptions of valid requests of every shape, and structure-aware
mutations (any node replaced by any JSON value, keys dropped, fields that steer the shape or
the rewrite added) - parsed whole and scanned, small and large. Requests that still parse
must agree between the two paths and rewrite to the intended document.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.bodies import Body
from kinference.requests import InferenceRequest, MalformedRequest, parse_request, rewrite
from tests.requests import pieces_of, scanned_body, uploaded_body, whole_body
from tests.requests.samples import SAMPLES
from tests.requests.test_rewrite import intended, random_plan

SAMPLE_NAMES = sorted(SAMPLES)
KEYS = [
    "role", "content", "type", "text", "image_url", "url", "source", "data", "tool_calls",
    "function", "name", "arguments", "input", "output", "system", "top_k", "kinference",
    "hint", "stream", "stream_options", "include_usage", "messages", "prompt", "max_tokens",
    "max_completion_tokens", "max_output_tokens", "tools", "input_schema", "instructions",
    "previous_response_id", "conversation", "summary", "file", "file_id", "file_data",
    "input_audio", "model", "functions", "dimensions", "id",
]  # fmt: skip

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.sampled_from(["user", "text", "image_url", "tool_use", "data:x;base64,AA", "http://a"]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=12,
)


def outcome(body: Body) -> tuple[Any, ...]:
    """Everything parse_request says, but the spans; raises anything but MalformedRequest."""
    try:
        r = parse_request(body)
    except MalformedRequest as exc:
        return ("malformed", str(exc))
    return (
        r.model,
        r.shape,
        r.stream,
        r.prompt,
        r.token_estimate,
        r.has_tools,
        r.max_output_tokens,
        r.hint,
    )


def both_ways(data: bytes, chunk: int) -> tuple[Any, ...]:
    whole = outcome(whole_body(data))
    scanned = outcome(scanned_body(data, chunk))
    if whole[0] != "malformed" or scanned[0] != "malformed":
        assert scanned == whole, data
    return whole


@settings(max_examples=500, deadline=None, database=None)
@given(st.binary(max_size=300), st.integers(1, 64))
def test_arbitrary_bytes(data: bytes, chunk: int) -> None:
    both_ways(data, chunk)


@settings(max_examples=300, deadline=None, database=None)
@given(st.sampled_from(SAMPLE_NAMES), st.randoms(use_true_random=False), st.integers(1, 64))
def test_corrupted_samples(name: str, rng: random.Random, chunk: int) -> None:
    data = bytearray(json.dumps(SAMPLES[name][0]).encode())
    for _ in range(rng.choice([1, 1, 2, 5])):
        at = rng.randrange(len(data) + 1)
        byte = rng.choice(b'{}[]":,\\ nu0a\xff\xc3')
        action = rng.randrange(3)
        if action == 0 and at < len(data):
            data[at] = byte
        elif action == 1:
            del data[at : at + rng.randrange(1, 20)]
        else:
            data.insert(at, byte)
    both_ways(bytes(data), chunk)


def paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every node of a JSON tree, the root first."""
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*path, index))
    return found


def at(doc: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def mutate(doc: dict[str, Any], rng: random.Random, draw: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for _ in range(rng.choice([1, 1, 2, 4])):
        path = rng.choice(paths(doc)[1:])
        parent, last = at(doc, path[:-1]), path[-1]
        action = rng.randrange(4)
        if action == 0:
            parent[last] = draw(json_values)
        elif action == 1:
            del parent[last]
        elif isinstance(parent, dict):
            parent[rng.choice(KEYS)] = draw(json_values)
        else:
            parent.insert(rng.randrange(len(parent) + 1), draw(json_values))
        if not doc:
            doc["model"] = "m"
    return doc


def rewrite_matches(body: Body, request: InferenceRequest, rng: random.Random) -> None:
    plan = random_plan(rng)
    result = rewrite(body, request, plan)
    doc = json.loads(b"".join(bytes(p) for p in body.pieces))
    text = b"".join(bytes(p) for p in result.pieces)
    assert json.dumps(json.loads(text), sort_keys=True) == json.dumps(
        intended(doc, request, plan), sort_keys=True
    )


@settings(max_examples=200, deadline=None, database=None)
@given(
    st.sampled_from(SAMPLE_NAMES),
    st.randoms(use_true_random=False),
    st.integers(1, 64),
    st.data(),
)
def test_mutated_requests(name: str, rng: random.Random, chunk: int, data: st.DataObject) -> None:
    doc = mutate(SAMPLES[name][0], rng, data.draw)
    raw = json.dumps(doc).encode()
    if both_ways(raw, chunk)[0] == "malformed":
        return
    body = Body(pieces_of(raw, chunk), reserved=len(raw))
    rewrite_matches(body, parse_request(body), rng)


@settings(max_examples=40, deadline=None, database=None)
@given(st.sampled_from(SAMPLE_NAMES), st.randoms(use_true_random=False), st.data())
def test_mutated_large_requests(name: str, rng: random.Random, data: st.DataObject) -> None:
    doc = mutate(SAMPLES[name][0], rng, data.draw)
    # Somewhere in the document, a string of 1.2 MB makes its top-level field a LargeValue.
    path = rng.choice(paths(doc)[1:] or [("blob",)])
    parent = at(doc, path[:-1])
    if isinstance(parent, list):
        parent.insert(path[-1], "QUJD" * 300_000)
    else:
        parent[path[-1]] = "QUJD" * 300_000
    raw = json.dumps(doc).encode()
    body = uploaded_body(raw, rng.choice([65_536, 1 << 20]), rng.choice([0, 256 * 1024]))
    if outcome(body)[0] != "malformed":
        rewrite_matches(body, parse_request(body), rng)

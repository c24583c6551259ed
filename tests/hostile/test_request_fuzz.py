"""Hostile request bodies: whatever the bytes, Pick sees a parsed request or BAD_REQUEST.

Extends `tests/requests/test_fuzz.py` with what attackers send on purpose: values that
break JSON libraries (integers of thousands of digits, 1e400, NaN, lone surrogates, deep
nesting), byte-level traps (invalid and overlong UTF-8, UTF-8-encoded surrogates, BOMs)
and ambiguous documents (duplicate keys). Each body goes through both paths Pick has
(parsed whole, scanned while it arrives and parsed member by member), and every body that
parses is rewritten by a random plan, which must not raise either.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.bodies import Body
from kinference.requests import MalformedRequest, parse_request, rewrite
from tests.requests import pieces_of, scanned_body, uploaded_body, whole_body
from tests.requests.samples import SAMPLES
from tests.requests.test_fuzz import paths
from tests.requests.test_rewrite import random_plan

SAMPLE_NAMES = sorted(SAMPLES)
PLACEHOLDER = "__hostile_value__"
DEEP = 50_000  # nesting levels: far past Python's recursion limit

# Raw JSON texts spliced in place of any value of a valid request.
HOSTILE_VALUES = [
    "1" * 5_000,  # past Python's int-from-string digit limit (4300)
    "-" + "9" * 4_301,
    "1e400",  # overflows a double to inf
    "-1e400",
    "1" + "0" * 400 + ".5",
    "NaN",
    "Infinity",
    "-Infinity",
    '"\\ud800"',  # a lone high surrogate
    '"\\udfff\\ud800"',  # surrogates in the wrong order
    '"a\\u0000b"',
    '"\\uFFFE\\uFEFF"',
    "[" * DEEP + "]" * DEEP,
    '{"a":' * DEEP + "1" + "}" * DEEP,
    "[" * DEEP,  # never closed
    '{"model": "a", "model": "b"}',
    "18446744073709551616",  # 2^64
    "-0",
    "0.0000000000000000000000000001e-400",
    '"' + "\\\\" * 1_000 + '"',
]
# Raw bytes spliced into the text of a valid request, anywhere.
HOSTILE_BYTES = [
    b"\xff",
    b"\xc0\xaf",  # overlong '/'
    b"\xed\xa0\x80",  # a UTF-8-encoded surrogate
    b"\xf4\x90\x80\x80",  # past U+10FFFF
    b"\xef\xbb\xbf",  # a BOM in the middle
    b"\x00",
    b"\\",
    b'"',
    b"\xe2\x80",  # a truncated sequence
]


def outcome(body: Body) -> tuple[Any, ...]:
    """What Pick sees; raises anything but MalformedRequest. A parsed request is also
    rewritten by a random plan (which may raise nothing)."""
    try:
        request = parse_request(body)
    except MalformedRequest:
        return ("malformed",)
    rewritten = rewrite(body, request, random_plan(random.Random(len(body.pieces))))
    assert sum(len(piece) for piece in rewritten.pieces) >= 0
    return ("ok", request.model, request.shape, request.stream, request.has_tools)


def all_paths(data: bytes, chunk: int) -> tuple[Any, ...]:
    """The outcome parsed whole, scanned in `chunk`-byte pieces, and uploaded with the
    scanner on; the two paths must agree whenever either parses."""
    whole = outcome(whole_body(data))
    scanned = outcome(scanned_body(data, chunk))
    uploaded = outcome(uploaded_body(data, max(chunk, 1_024), 0))
    if "ok" in (whole[0], scanned[0], uploaded[0]):
        assert whole == scanned == uploaded, data[:200]
    return whole


def with_hostile_value(doc: dict[str, Any], rng: random.Random, raw: str) -> bytes:
    doc = copy.deepcopy(doc)
    path = rng.choice(paths(doc)[1:])
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = PLACEHOLDER
    return json.dumps(doc).replace(f'"{PLACEHOLDER}"', raw, 1).encode()


@settings(max_examples=200, deadline=None, database=None)
@given(
    st.sampled_from(SAMPLE_NAMES),
    st.sampled_from(HOSTILE_VALUES),
    st.randoms(use_true_random=False),
    st.integers(1, 4_096),
)
def test_hostile_values_anywhere(name: str, raw: str, rng: random.Random, chunk: int) -> None:
    all_paths(with_hostile_value(SAMPLES[name][0], rng, raw), chunk)


@settings(max_examples=200, deadline=None, database=None)
@given(
    st.sampled_from(SAMPLE_NAMES),
    st.lists(st.sampled_from(HOSTILE_BYTES), min_size=1, max_size=3),
    st.randoms(use_true_random=False),
    st.integers(1, 64),
)
def test_hostile_bytes_anywhere(
    name: str, inserts: list[bytes], rng: random.Random, chunk: int
) -> None:
    data = bytearray(json.dumps(SAMPLES[name][0], ensure_ascii=False).encode())
    for insert in inserts:
        at = rng.randrange(len(data) + 1)
        data[at:at] = insert
    all_paths(bytes(data), chunk)


@settings(max_examples=100, deadline=None, database=None)
@given(st.sampled_from(SAMPLE_NAMES), st.integers(1, 64), st.booleans())
def test_duplicate_top_level_keys(name: str, chunk: int, model_first: bool) -> None:
    """A repeated key is read as its last occurrence on both paths (as json.loads does),
    so the scanner and the whole parse never disagree about the model."""
    doc = SAMPLES[name][0]
    text = json.dumps(doc)
    extra = '"model": "decoy", ' if model_first else ""
    data = ("{" + extra + text[1:-1] + ', "model": "last"}').encode()
    result = all_paths(data, chunk)
    assert result[0] == "malformed" or result[1] == "last"


@settings(max_examples=60, deadline=None, database=None)
@given(st.sampled_from(SAMPLE_NAMES), st.integers(1, 64), st.integers(1, 3))
def test_byte_order_marks(name: str, chunk: int, marks: int) -> None:
    data = b"\xef\xbb\xbf" * marks + json.dumps(SAMPLES[name][0]).encode()
    all_paths(data, chunk)


def test_deep_nesting_of_a_large_scanned_body() -> None:
    """A 2 MiB body of nothing but brackets, scanned in 64 KiB chunks."""
    for data in (b"[" * (2 << 20), b'{"model": "m", "messages": ' + b"[" * (2 << 20)):
        body = Body(pieces_of(data, 65_536), reserved=len(data))
        assert outcome(body) == ("malformed",)
        assert outcome(uploaded_body(data, 65_536, 0)) == ("malformed",)

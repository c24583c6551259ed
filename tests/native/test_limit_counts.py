"""`_scan.limit_counts` (the strict parse's pre-count of brackets and colons, in C) against
its pure reference `requests.fields.pure_limit_counts`: the same counts over random bytes,
JSON soup and bodies, as bytes, bytearrays and memoryviews; the same verdict of
`_may_break_scan_limits` either way. Skips where the extension is not built
(`test_scan.py` checks that a machine able to build it did)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.native import load_limit_counts
from kinference.requests import fields
from kinference.requests.fields import pure_limit_counts
from kinference.requests.spans import MAX_DEPTH, MAX_MEMBERS


@pytest.fixture(name="native")
def _native() -> object:
    counts = load_limit_counts()
    if counts is None:
        pytest.skip("kinference.native._scan is not built here")
    return counts


SOUP = st.lists(st.sampled_from([b"{", b"[", b":", b"]", b"}", b'"', b"\\", b"a", b"\xff"]))


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=2048) | SOUP.map(b"".join))
def test_the_counts_equal_the_pure_ones(data: bytes) -> None:
    native = load_limit_counts()
    if native is None:
        pytest.skip("kinference.native._scan is not built here")
    expected = pure_limit_counts(data)
    for form in (data, bytearray(data), memoryview(bytearray(data))):
        assert native(form) == expected


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{" * (MAX_DEPTH + 1),
        b"[" * MAX_DEPTH,
        b":" * (MAX_MEMBERS + 1),
        json.dumps({"messages": [{"role": "user", "content": "a:{["}] * 300}).encode(),
        bytes(range(256)) * 64,
    ],
)
def test_edges_and_the_verdict(native: object, body: bytes) -> None:
    assert native(body) == pure_limit_counts(body)  # type: ignore[operator]
    brackets, colons = pure_limit_counts(body)
    assert fields._may_break_scan_limits(body) == (brackets > MAX_DEPTH or colons > MAX_MEMBERS)


def test_a_non_buffer_is_refused(native: object) -> None:
    with pytest.raises(TypeError):
        native("text")  # type: ignore[operator]
    with pytest.raises(TypeError):
        native(None)  # type: ignore[operator]

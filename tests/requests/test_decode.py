"""The parser's decoding: json.loads values (strict_loads where it accepts); discard empties
in slices."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.requests.decode import Refused, discard, loads, strict_loads

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=8) | st.dictionaries(st.text(max_size=8), children, max_size=8)
    ),
    max_leaves=60,
)


@settings(deadline=None, max_examples=150)
@given(json_values)
def test_loads_gives_json_loads_values(value: Any) -> None:
    text = json.dumps(value)
    assert loads(text) == json.loads(text)


# What json.loads takes beyond RFC 8259 too: NaN and infinities, integers past 64 bits,
# lone surrogates (escaped), any character in keys and strings.
wide_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats()
    | st.text(st.characters(codec=None))
    | st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=3),
    lambda children: (
        st.lists(children, max_size=8)
        | st.dictionaries(st.text(st.characters(codec=None), max_size=8), children, max_size=8)
    ),
    max_leaves=60,
)
# Texts near JSON: fragments of it joined, so the drawn bytes are often almost valid.
JSON_BITS = (
    *("{", "}", "[", "]", ",", ":", '"', "\\", " ", "\n", "\t", "\x0b", "\x00", "\x7f"),
    *('"a"', '"k":', "0", "-0", "1", "-", ".", "e", "E+", "1e400", "-1e400", "1.5", "01"),
    *("true", "false", "null", "NaN", "Infinity", "-Infinity", "\\u00e9", "\\ud800"),
    *("\\udc00", "\\ud83d\\ude00", "\\x", "é", "\ufeff", "18446744073709551616"),
)
near_json = st.lists(st.sampled_from(JSON_BITS), max_size=30).map("".join)


def _same_as_json_loads(raw: bytes) -> None:
    """strict_loads of `raw` refuses, or gives json.loads's value: equal types, key order,
    signs of zeros (repr tells them apart; it also makes NaN equal to itself)."""
    try:
        expected = repr(json.loads(raw.decode("utf-8")))
    except (ValueError, RecursionError):  # invalid UTF-8 or JSON, too deep
        expected = None
    try:
        found = repr(strict_loads(raw))
    except Refused:
        return
    assert found == expected


@settings(deadline=None, max_examples=300)
@given(wide_values, st.booleans())
def test_strict_loads_gives_json_loads_values_or_refuses(value: Any, ascii_only: bool) -> None:
    _same_as_json_loads(json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass"))


@settings(deadline=None, max_examples=200)
@given(near_json | st.text(st.characters(codec=None)))
def test_strict_loads_accepts_no_text_json_loads_refuses(text: str) -> None:
    _same_as_json_loads(text.encode("utf-8", "surrogatepass"))


@settings(deadline=None, max_examples=300)
@given(st.binary(max_size=64))
def test_strict_loads_of_any_bytes_is_json_loads_or_refused(raw: bytes) -> None:
    _same_as_json_loads(raw)


JSON_NUMBER = r"\A-?(0|[1-9][0-9]{0,40})(\.[0-9]{1,40})?([eE][+-]?[0-9]{1,3})?\Z"


@settings(deadline=None, max_examples=200)
@given(st.from_regex(JSON_NUMBER))
def test_strict_loads_reads_numbers_as_json_loads_does(text: str) -> None:
    """Long mantissas, exponents past the float range either way: the same float or int
    (correctly rounded), or a refusal."""
    _same_as_json_loads(text.encode())


def test_strict_loads_refuses_what_only_json_loads_takes() -> None:
    for text in (b"NaN", b"[Infinity]", b"1e400", b'"\\ud800"', b"[" * 5000 + b"]" * 5000):
        try:
            strict_loads(text)
        except Refused:
            continue
        raise AssertionError(f"strict_loads took {text[:20]!r}")
    assert strict_loads(b"18446744073709551616") == 18446744073709551616


@settings(deadline=None, max_examples=150)
@given(json_values)
def test_discard_empties_any_value_in_place(value: Any) -> None:
    discard(value)
    if isinstance(value, list | dict):
        assert not value


def test_discard_takes_apart_wide_and_deep_values() -> None:
    wide = json.loads("[" + ",".join(['{"a":[1,2]}'] * 50_000) + "]")
    children = list(wide[:10])
    discard(wide)
    assert wide == [] and all(child == {} for child in children)
    deep: list[Any] = []
    node = deep
    for _ in range(100_000):  # far deeper than a recursive teardown could go
        child: list[Any] = [1]
        node.append(child)
        node = child
    discard(deep)
    assert deep == []

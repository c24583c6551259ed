"""The GIL-friendly decoder: the same values as json.loads; discard empties in slices."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.requests.decode import _INTERRUPTIBLE, discard, loads

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=8) | st.dictionaries(st.text(max_size=8), children, max_size=8)
    ),
    max_leaves=60,
)


@settings(deadline=None, max_examples=150)
@given(json_values)
def test_both_decoders_give_json_loads_values(value: Any) -> None:
    text = json.dumps(value)
    assert loads(text) == json.loads(text)
    assert _INTERRUPTIBLE.decode(text) == json.loads(text)


def test_a_dense_text_takes_the_interruptible_decoder_and_the_same_value() -> None:
    text = "[" + ",".join(["{}"] * 200_000) + "]"  # well past the C budget
    assert loads(text) == json.loads(text)


@pytest.mark.parametrize("text", ['[1, "x"', "[1,]", '{"a" 1}', "[NaNx]", "01"])
def test_both_decoders_refuse_what_json_loads_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        _INTERRUPTIBLE.decode(text)


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

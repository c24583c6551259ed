"""The parser's decoding: json.loads values; discard empties in slices."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.requests.decode import discard, loads

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

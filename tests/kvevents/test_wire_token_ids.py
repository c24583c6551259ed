"""The token ids of a stored event, checked in C by `array.array` (h201): every list the
earlier numpy check (kept here as the oracle) accepted is accepted with the same ids, and
every one it refused is refused, the batch with it."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.kvevents.wire import MalformedBatch, _token_ids, decode_batch


def numpy_token_ids(values: Any) -> npt.NDArray[np.uint32] | None:
    """The check as it was up to a1dfcf4 (numpy's conversion, its min and max)."""
    if not isinstance(values, list):
        return None
    if not values:
        return np.zeros(0, dtype=np.uint32)
    try:
        array = np.asarray(values)
    except (ValueError, TypeError, OverflowError):
        return None
    if array.dtype.kind not in "iu" or array.ndim != 1:
        return None
    if not (array.min() >= 0 and array.max() < 1 << 32):
        return None
    return array.astype(np.uint32)


_IDS = st.one_of(
    st.integers(0, 2**32 - 1),
    st.integers(-(2**70), 2**70),
    st.sampled_from([-1, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 2**64]),
)
_ODD = st.one_of(
    st.booleans(),
    st.floats(),
    st.none(),
    st.text(max_size=3),
    st.binary(max_size=3),
    st.lists(st.integers(0, 9), max_size=2),
)
_LISTS = st.one_of(
    st.lists(_IDS, max_size=40),
    st.lists(st.one_of(_IDS, _ODD), max_size=12),
    st.lists(st.booleans(), max_size=6),
    st.lists(st.lists(st.integers(0, 9), min_size=2, max_size=2), max_size=3),
)


def _same(got: npt.NDArray[np.uint32] | None, want: npt.NDArray[np.uint32] | None) -> None:
    assert (got is None) == (want is None)
    if got is not None and want is not None:
        assert got.dtype == np.uint32 and got.ndim == 1
        assert got.tolist() == want.tolist()


@settings(max_examples=600, deadline=None)
@given(_LISTS)
def test_accepts_and_refuses_what_numpys_check_did(values: list[Any]) -> None:
    _same(_token_ids(values), numpy_token_ids(values))


@pytest.mark.parametrize(
    "values",
    [
        [],
        [0, 2**32 - 1],
        [True, 5],  # a bool among ints is the int it is (numpy made the array int64)
        [5, False],
        [True],  # bools only: refused (numpy's array was of bools)
        [True, False, True],
        [1, -1],
        [2**32],
        [2**64],
        [2**70],
        [1, 2.0],
        [1, "2"],
        [1, b"2"],
        [1, None],
        [[1, 2], [3, 4]],
        [[1], [2, 3]],
        "12",
        None,
    ],
)
def test_edge_cases_as_numpys_check(values: Any) -> None:
    _same(_token_ids(values), numpy_token_ids(values))


def test_the_array_is_uint32_and_writable() -> None:
    got = _token_ids([1, 2, 3])
    assert got is not None and got.dtype == np.uint32 and got.flags.c_contiguous
    assert got.flags.writeable


@pytest.mark.parametrize(
    "tokens", [[True, False], [1, -2], [1, 2**32], [1, 2.0], [1, "2"], [1, None], [[1], [2]]]
)
def test_a_batch_with_such_ids_is_refused(tokens: list[Any]) -> None:
    payload = msgpack.packb([1.0, [["BlockStored", [1], None, tokens, 2]]])
    with pytest.raises(MalformedBatch, match="token_ids is not an array of token ids"):
        decode_batch(payload)

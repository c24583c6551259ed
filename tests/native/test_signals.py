"""`_ttft.signals` (a Pick's per-slot engine signals in C) against its numpy reference,
`EngineReadings.engine_signals` and `.queue_now`: the same values over random tables
(unknown, negative, infinite and stale readings; picks since them), NotImplemented for
arguments it does not take, and `WorkerTable.signals_now` the same with and without it.
Skips where the extension is not built (`test_build.py` checks that a machine able to
build it did)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kinference.native import load_signals
from kinference.routing import WorkerTable

values = st.one_of(
    st.just(math.nan),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-3, max_value=70).map(float),
    st.sampled_from([0.0, -0.0, 0.5, 64.0]),
)
COLUMNS = ("waiting", "kv_usage", "running", "inflight", "inflight_at_reading", "batch")


def _same(got: np.ndarray, expected: np.ndarray) -> bool:
    nan = np.isnan(expected)
    return bool(
        (np.isnan(got) == nan).all()
        and (got[~nan] == expected[~nan]).all()
        and (np.signbit(got[~nan]) == np.signbit(expected[~nan])).all()
    )


@settings(max_examples=150, deadline=None)
@given(
    st.integers(min_value=1, max_value=12).flatmap(
        lambda n: st.lists(st.tuples(*[values] * 7), min_size=n, max_size=n)
    ),
    st.floats(min_value=0.0, max_value=200.0) | st.just(math.nan),
    st.floats(min_value=0.0, max_value=5.0) | st.just(math.inf),
)
# Fresh readings whose sum overflows, and an infinite batch under an infinite count (inf -
# inf): numpy's form warned (an error under the suite's filter) where C is quiet.
@example([(1.0, 1e308, 0.5, 1e308, 0.0, 0.0, 4.0)], 1.0, 5.0)
@example([(1.0, 1.0, 0.5, math.inf, 0.0, 0.0, math.inf)], 1.0, 5.0)
def test_the_signals_equal_the_numpy_ones(
    rows: list[tuple[float, ...]], now: float, max_age: float
) -> None:
    signals = load_signals()
    if signals is None:
        pytest.skip("kinference.native._ttft is not built here")
    table = WorkerTable(capacity=1)
    table.slots(f"10.0.0.{i}:8000" for i in range(len(rows)))
    for slot, row in enumerate(rows):
        for name, value in zip(("scraped_at", *COLUMNS), row, strict=True):
            getattr(table, name)[slot] = value
    waiting, kv_usage = table.engine_signals(now, max_age)
    expected = (waiting, kv_usage, table.queue_now(waiting))
    out = np.empty(3 * len(table.scraped_at))
    columns = [getattr(table, name) for name in ("scraped_at", *COLUMNS)]
    assert signals(out, now, max_age, *columns) is None  # taken: the C form ran
    assert all(_same(a, b) for a, b in zip(np.split(out, 3), expected, strict=True))
    got = table.signals_now(now, max_age)
    for mine, theirs in zip(got, expected, strict=True):
        assert _same(mine, theirs)
    pure = table.signals_now(now, max_age, native=False)
    assert all(_same(a, b) for a, b in zip(pure, expected, strict=True))


def test_what_it_does_not_take_is_left_to_numpy() -> None:
    signals = load_signals()
    if signals is None:
        pytest.skip("kinference.native._ttft is not built here")
    columns = [np.zeros(4) for _ in range(7)]
    assert signals(np.empty(12), 1.0, 1.0, *columns) is None
    assert signals(np.empty(11), 1.0, 1.0, *columns) is NotImplemented  # out's length
    assert signals(np.empty(12), 1, 1.0, *columns) is NotImplemented  # an int clock
    strided = np.zeros(8)[::2]
    assert signals(np.empty(12), 1.0, 1.0, strided, *columns[1:]) is NotImplemented
    ints = np.zeros(4, dtype=np.int64)
    assert signals(np.empty(12), 1.0, 1.0, *columns[:6], ints) is NotImplemented
    assert signals(np.empty(12), 1.0, 1.0, *columns[:6], np.zeros(5)) is NotImplemented
    frozen = np.empty(12)
    frozen.flags.writeable = False
    assert signals(frozen, 1.0, 1.0, *columns) is NotImplemented
    assert signals(np.empty(12), 1.0, 1.0, *columns[:6], [0.0] * 4) is NotImplemented
    with pytest.raises(TypeError):
        signals(np.empty(12), 1.0, 1.0)

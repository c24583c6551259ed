"""The C TTFT form on arguments a Pick never builds: what it does not take falls back to
the pure form (the same answer), and what fails fails as the pure form does."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from kinference.routing.scorers.ttft import TtftScorer
from tests.native.test_ttft import recording
from tests.native.ttft_cases import CAPACITY, build, run

native = pytest.importorskip("kinference.native._ttft")

CASE: dict[str, Any] = {
    "columns": {
        name: [float(i % 5) for i in range(CAPACITY)]
        for name in (
            "inflight",
            "running",
            "inflight_at_reading",
            "running_max",
            "pending_prefill",
            "prefill_ended",
            "probing",
        )
    }
    | {
        name: [math.nan] * CAPACITY
        for name in (
            "batch",
            "batch_limit",
            "batch_floor",
            "batch_ceiling",
            "prefill_since",
            "probe_late",
        )
    },
    "waiting": [0.0] * CAPACITY,
    "slots": [1, 2, 3],
    "rates": [[0.1, 0.2, math.nan, 0.3], None, [900.0] * 8],
    "busy": 2.0,
    "config": {},
    "prompt": 4000.0,
    "cached": [1000.0, 0.0, 3000.0],
    "memory": ([1.0, 0.0, 2.0], [2.0, 1.0, 3.0]),
    "footprint": [10.0, 0.0, 30.0],
    "shared": [4, 12],
    "hashes": tuple(range(1, 13)),
}


def answers(case: dict[str, Any], scoring: bool = True) -> tuple[object, object, list[object]]:
    """(the C form's answer, the pure form's, what `terms` returned each call)."""
    taken: list[object] = []
    got = []
    for form in (True, False):
        ctx, rates, config = build(case)
        scorer = TtftScorer(config, rates, native=form)
        if form:
            scorer._native = recording(taken)
        got.append(run(scorer, ctx, scoring))
    return got[0], got[1], taken


@pytest.mark.parametrize("scoring", [True, False])
def test_the_plain_case_is_taken_and_the_same(scoring: bool) -> None:
    mine, pure, taken = answers(CASE, scoring)
    assert taken == [None] and mine == pure and len(mine) > 1


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"slots": [1, CAPACITY]}, IndexError),  # beyond the table
        ({"slots": [1, -CAPACITY - 1]}, IndexError),
        ({"slots": [-1, -2, -3]}, None),  # numpy's item: from the end
        ({"cached": [1.0]}, IndexError),  # fewer cached than candidates
        ({"memory": ([1.0, 0.0, 2.0], [2.0, 0.0, 3.0])}, ZeroDivisionError),
        ({"memory": ([1.0], [2.0])}, IndexError),
        ({"footprint": [1.0, 2.0]}, ValueError),  # zip(strict=True)
        ({"footprint": []}, ValueError),  # max() of nothing
        ({"waiting": [0.0] * 2}, IndexError),
        ({"pool": [1, 2, 3, CAPACITY]}, IndexError),  # the pool's slots beyond the table
        ({"pool": [-1, 0, 1, 2, 3]}, None),
        ({"pool": []}, None),  # no evidence: NaN peer and most, no limit
    ],
)
def test_failures_are_the_pure_forms(change: dict[str, Any], error: type | None) -> None:
    mine, pure, _ = answers(CASE | change)
    assert mine == pure
    assert (mine[0] if len(mine) == 1 else None) is error


def test_a_huge_negative_occupancy_overflows_its_square_as_in_python() -> None:
    columns = dict(CASE["columns"])
    columns["inflight"] = [-1e300] * CAPACITY
    columns["running"] = [math.nan] * CAPACITY  # no fresh reading: the in-flight count
    mine, pure, taken = answers(CASE | {"columns": columns})
    assert mine == pure == (OverflowError,) and taken == []  # raised, nothing answered


@pytest.mark.parametrize(
    "change",
    [
        {"cached": np.array([1, 0, 3])},  # not float64
        {"memory": ([1, 0, 2], [2.0, 1.0, 3.0])},  # ints in the lists
        {"footprint": (10.0, 0.0, 30.0)},  # not a list
        {"prompt": 10**400},  # no float
        {"config": {"prior_batch": 8}},
        {"pool": np.array([1, 2, 3], dtype=np.int32)},  # not intp
    ],
)
def test_what_it_does_not_take_falls_back_to_the_pure_form(change: dict[str, Any]) -> None:
    case = CASE | {key: value for key, value in change.items() if key != "cached"}
    if isinstance(change.get("pool"), np.ndarray):  # given as it is (`build` makes intp)
        case["pool"] = change["pool"]
    if "cached" in change:
        case["cached"] = list(change["cached"])
    mine, pure, taken = answers(case)
    assert mine == pure
    if "config" not in change and "cached" not in change:
        assert taken == [NotImplemented]


def test_the_clocks_errors_are_raised() -> None:
    ctx, rates, config = build(CASE)
    scorer = TtftScorer(config, rates)
    ctx.table.prefill_since[:] = 50.0  # draining since: the clock is read

    def fails() -> float:
        raise LookupError("from the clock")

    ctx.table._clock = fails
    with pytest.raises(LookupError, match="from the clock"):
        scorer._score_small(ctx)
    ctx.table._clock = lambda: "later"  # type: ignore[assignment,return-value]
    with pytest.raises(TypeError):  # as `clock() - since` would
        scorer._score_small(ctx)


def test_a_table_without_its_arrays_raises_attribute_error() -> None:
    ctx, rates, config = build(CASE)
    out = np.empty((7, 3))
    with pytest.raises(AttributeError):
        native.terms(
            out, ctx.slots, ctx.cached_tokens, ctx.signals.waiting, object(), None, None,
            None, TtftScorer(config, rates)._constants, 0.0, 100.0, None, None, None,
            lambda *a, **k: 0.0, True, None,
        )  # fmt: skip


def test_a_short_out_or_a_wrong_count_of_arguments_is_refused() -> None:
    ctx, rates, config = build(CASE)
    constants = TtftScorer(config, rates)._constants
    args = [np.empty((7, 2)), ctx.slots, ctx.cached_tokens, ctx.signals.waiting, ctx.table,
            None, None, None, constants, 0.0, 100.0, None, None, None,
            lambda *a, **k: 0.0, True, None]  # fmt: skip
    with pytest.raises(ValueError, match="smaller"):
        native.terms(*args)
    with pytest.raises(TypeError):
        native.terms(*args[:-1])

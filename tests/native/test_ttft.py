"""The C form of the TTFT scorer's small candidate sets (`kinference.native._ttft`) gives
the pure form's values bit for bit, and its exceptions, on random Picks."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from kinference.native import load_ttft
from kinference.routing.scorers.ttft import TtftScorer
from tests.native.ttft_cases import CAPACITY, COLUMNS, build, picks, run

pytest.importorskip("kinference.native._ttft")


def recording(taken: list[object]) -> Callable[..., object]:
    """`_ttft.terms`, keeping what it answers in `taken`."""
    from kinference.native import _ttft

    def terms(*args: object) -> object:
        taken.append(_ttft.terms(*args))
        return taken[-1]

    return terms


def both(case: dict[str, Any], scoring: bool) -> tuple[tuple[object, ...], tuple[object, ...]]:
    """(the C form's answer, the pure form's) on the same drawn Pick."""
    answers = []
    for native in (True, False):
        ctx, rates, config = build(case)
        scorer = TtftScorer(config, rates, native=native)
        assert (scorer._native is not None) == native
        taken: list[object] = []
        if native:  # every drawn Pick is of the types the C form takes: none falls back
            scorer._native = recording(taken)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            answers.append(run(scorer, ctx, scoring))
        assert NotImplemented not in taken
    return answers[0], answers[1]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=picks())
def test_the_terms_are_the_pure_forms(case: dict[str, Any]) -> None:
    native, pure = both(case, scoring=False)
    assert native == pure


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=picks())
def test_the_scores_are_the_pure_forms(case: dict[str, Any]) -> None:
    native, pure = both(case, scoring=True)
    assert native == pure


def test_the_loader_answers_the_extensions_function() -> None:
    from kinference.native import _ttft

    assert load_ttft() is _ttft.terms


@pytest.mark.parametrize("huge", [1e7, 1e20])
@pytest.mark.parametrize("scoring", [False, True])
def test_huge_readings_end_alike(huge: float, scoring: bool) -> None:
    """A broken exporter's running count (an engine seen running 3 at most, with no batch
    known, now reads `huge` running and the prior batch is as huge): the unknown batch's
    doubt weighs a bounded number of batch sizes in both forms (it looped `huge` times,
    past 2**53 for ever)."""
    nan = math.nan
    columns = {name: [nan] * CAPACITY for name in COLUMNS}
    columns.update(running=[huge] * CAPACITY, running_max=[3.0] * CAPACITY)
    columns.update(inflight=[0.0] * CAPACITY, inflight_at_reading=[0.0] * CAPACITY)
    columns.update(pending_prefill=[0.0] * CAPACITY)
    case = {
        "columns": columns, "waiting": [0.0] * CAPACITY, "slots": [0, 1], "rates": [None] * 3,
        "busy": None, "config": {"prior_batch": huge}, "prompt": 4096.0, "cached": [0.0, 0.0],
        "memory": None, "footprint": None, "shared": [], "hashes": (),
    }  # fmt: skip
    native, pure = both(case, scoring)
    assert native == pure

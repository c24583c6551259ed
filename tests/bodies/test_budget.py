"""The server-wide byte budget."""

from __future__ import annotations

import pytest

from kinference.bodies import ByteBudget
from kinference.errors import ResourceExhausted


def test_reserve_up_to_the_limit_exactly() -> None:
    budget = ByteBudget(100)
    budget.reserve(60)
    budget.reserve(40)
    assert budget.used == 100


def test_reserve_past_the_limit_fails_and_holds_nothing_more() -> None:
    budget = ByteBudget(100)
    budget.reserve(99)
    with pytest.raises(ResourceExhausted, match="99 of 100"):
        budget.reserve(2)
    assert budget.used == 99
    budget.reserve(1)
    assert budget.used == 100


def test_release_returns_bytes_and_never_goes_negative() -> None:
    budget = ByteBudget(100)
    budget.reserve(30)
    budget.release(10)
    assert budget.used == 20
    budget.release(50)
    assert budget.used == 0


def test_reserve_unchecked_may_pass_the_limit() -> None:
    budget = ByteBudget(10)
    budget.reserve(10)
    budget.reserve_unchecked(5)
    assert budget.used == 15
    with pytest.raises(ResourceExhausted):
        budget.reserve(1)
    budget.release(15)
    assert budget.used == 0

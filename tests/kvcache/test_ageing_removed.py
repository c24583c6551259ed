"""A few blocks removed (an engine step's) leave their touches in Python, not numpy (h201):
the worker's eviction order is the same as the numpy path leaves it."""

from __future__ import annotations

import copy
import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.kvcache.ageing import _NONE, _SMALL, WorkerAges

_BLOCKS = st.lists(st.integers(0, 200), min_size=1, max_size=40)


def _numpy_removed(ages: WorkerAges, blocks: list[int]) -> None:
    """`WorkerAges.removed` as it was up to a1dfcf4, whatever the number of blocks."""
    found = map(ages.touched.pop, blocks, itertools.repeat(_NONE))
    ages._release(np.fromiter(found, np.int64, len(blocks)), True)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.lists(st.integers(0, 200), max_size=_SMALL)),
        min_size=1,
        max_size=30,
    )
)
def test_a_few_removed_leave_the_order_as_numpy_did(steps: list[tuple[bool, list[int]]]) -> None:
    ages, oracle = WorkerAges(), WorkerAges()
    removals = ((ages, WorkerAges.removed), (oracle, _numpy_removed))
    probe = list(range(201))
    for stores, blocks in steps:
        for target, remove in removals:
            target.touch(blocks) if stores else remove(target, blocks)
        assert ages == oracle
        assert ages.ranks(probe).tolist() == oracle.ranks(probe).tolist()


def test_removing_nothing_changes_nothing() -> None:
    ages = WorkerAges()
    ages.touch(list(range(40)))
    before = copy.deepcopy(ages)
    ages.removed([])
    assert ages == before

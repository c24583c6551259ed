"""The native block store answers as the Python one and as the index before the split.

Three indexes take the same random operations: `LegacyPrefixIndex` (main's class before
the store was split out), `PrefixIndex` over `PyPrefixStore` and over the native
`PrefixStore` (where built); every answer, exception, capacity estimate, footprint and
size must agree, dicts in the same order.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kinference.routing.prefix import PrefixIndex
from kinference.routing.prefix_store import PyPrefixStore
from tests.native.legacy_prefix import LegacyPrefixIndex

try:
    from kinference.native._prefix import PrefixStore
except ImportError:  # not built: the Python store is still held to main's class
    STORES: tuple[Callable[[], Any], ...] = (PyPrefixStore,)
else:
    STORES = (PyPrefixStore, PrefixStore)

TOP = 2**64 - 1
SLOTS = (0, 1, 2, 3, 2**40, -7)
BLOCKS = (0, 1, 2, 3, 5, 8, 13, 21, 2**32, 2**63 - 1, 2**63, TOP - 1, TOP)


def outcome(call: Callable[..., Any], *args: Any) -> Any:
    """A call's answer, or its exception's type: both must agree."""
    try:
        answer = call(*args)
    except Exception as error:  # compared, not swallowed
        return type(error)
    return list(answer.items()) if isinstance(answer, dict) else answer


class Trio:
    """The same operation on the three indexes; `same` compares what they answered."""

    def __init__(self, bound: int) -> None:
        self.indexes: list[Any] = [
            LegacyPrefixIndex(bound),
            *(PrefixIndex(bound, store=store()) for store in STORES),
        ]

    def same(self, name: str, *args: Any) -> Any:
        answers = [outcome(getattr(index, name), *args) for index in self.indexes]
        assert all(answer == answers[0] for answer in answers), (name, args, answers)
        return answers[0]

    def check(self) -> None:
        slots = np.array([s for s in SLOTS if 0 <= s < 2**40] + [9], dtype=np.intp)
        self.same("footprint", slots)
        self.same("__len__")
        capacities = [list(index.capacity.items()) for index in self.indexes]
        assert all(capacity == capacities[0] for capacity in capacities)


hash_lists = st.lists(st.sampled_from(BLOCKS), max_size=14)


class Operations(RuleBasedStateMachine):
    """Records (also deferred, also of the same object again), matches, held (after a
    match of the same object too), shortfalls, confirmations and forgets at small bounds."""

    def __init__(self) -> None:
        super().__init__()
        self.trio = Trio(3)
        self.recorded: list[Sequence[int]] = []

    @rule(bound=st.integers(1, 12))
    def fresh(self, bound: int) -> None:
        self.trio = Trio(bound)
        self.recorded = []

    def _hashes(self, data: st.DataObject) -> Sequence[int]:
        again: bool = data.draw(st.booleans())
        if self.recorded and again:
            earlier = data.draw(st.sampled_from(self.recorded))
            how = data.draw(st.sampled_from(["same", "prefix", "longer"]))
            if how == "same":
                return earlier  # the very object: `record` may skip it
            cut = data.draw(st.integers(0, len(earlier)))
            tail = data.draw(hash_lists) if how == "longer" else []
            return (*earlier[:cut], *tail)
        drawn = data.draw(hash_lists)
        return tuple(drawn) if data.draw(st.booleans()) else drawn

    @rule(data=st.data(), slot=st.sampled_from(SLOTS), later=st.booleans())
    def record(self, data: st.DataObject, slot: int, later: bool) -> None:
        hashes = self._hashes(data)
        self.recorded.append(hashes)
        self.trio.same("record_later" if later else "record", slot, hashes)

    @rule()
    def flush(self) -> None:
        self.trio.same("flush")

    @rule(data=st.data(), slot=st.sampled_from(SLOTS), first=st.booleans())
    def held(self, data: st.DataObject, slot: int, first: bool) -> None:
        probe = self._hashes(data)
        if first:  # a Pick: match, then held on the same object (the memo)
            self.trio.same("match", probe)
        self.trio.same("held", slot, probe)

    @rule(data=st.data())
    def match(self, data: st.DataObject) -> None:
        self.trio.same("match", self._hashes(data))

    @precondition(lambda self: self.recorded)
    @rule(
        data=st.data(),
        slot=st.sampled_from(SLOTS),
        age=st.none() | st.integers(0, 40),
    )
    def shortfall(self, data: st.DataObject, slot: int, age: int | None) -> None:
        hashes = data.draw(st.sampled_from(self.recorded))
        kept = data.draw(st.integers(-3, len(hashes) + 1))
        self.trio.same("shortfall", slot, hashes, kept, age)

    @rule(slot=st.sampled_from(SLOTS), age=st.none() | st.integers(0, 40))
    def confirmed(self, slot: int, age: int | None) -> None:
        self.trio.same("confirmed", slot, age)

    @rule(slot=st.sampled_from(SLOTS))
    def forget(self, slot: int) -> None:
        self.trio.same("forget", slot)

    @invariant()
    def observed_alike(self) -> None:
        self.trio.check()


Operations.TestCase.settings = settings(max_examples=100, stateful_step_count=60, deadline=None)
test_random_operations_answer_alike = Operations.TestCase


@pytest.mark.parametrize("seed", range(6))
def test_long_runs_at_larger_bounds_answer_alike(seed: int) -> None:
    """Prompts of a few hundred blocks from a tree of shared prefixes on six slots, bounds
    of a few hundred: the tables grow, shrink and compact many times over."""
    rng = random.Random(seed)
    trio = Trio(rng.choice([50, 200, 700]))
    stems = [[rng.getrandbits(64) for _ in range(rng.randint(1, 300))] for _ in range(8)]
    prompts = [
        (*stem[: rng.randint(0, len(stem))], *(rng.getrandbits(64) for _ in range(40)))
        for stem in stems
        for _ in range(6)
    ]
    for step in range(1500):
        slot, prompt = rng.randrange(6), rng.choice(prompts)
        roll = rng.random()
        if roll < 0.55:
            trio.same("record_later" if roll < 0.4 else "record", slot, prompt)
        elif roll < 0.8:
            trio.same("match", prompt)
            trio.same("held", rng.randrange(6), prompt)
        elif roll < 0.93:
            kept = rng.randint(0, len(prompt))
            trio.same("shortfall", slot, prompt, kept, rng.choice([None, 5, 100, 2000]))
        elif roll < 0.97:
            trio.same("confirmed", slot, rng.choice([None, 10, 1000]))
        else:
            trio.same("forget", slot)
        if step % 25 == 0:
            trio.check()
    trio.check()

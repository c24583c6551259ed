"""The native block store when a call fails midway: no allocation failure leaves it
corrupt or raises anything but MemoryError, and an exception of a slot's `__index__` is
raised, not taken for "never recorded"."""

from __future__ import annotations

from typing import Any

import pytest

from kinference.routing.prefix_store import PyPrefixStore

native = pytest.importorskip("kinference.native._prefix")

KEYS = tuple(range(10**6, 10**6 + 3_000))  # a record that grows every table ~9 times


def state(store: Any) -> tuple[object, ...]:
    """What a store answers about KEYS, slots 0 and 1 and their blocks."""
    return (
        len(store),
        store.footprint([0, 1]),
        list(store.match(KEYS).items()),
        store.held(0, KEYS, 0),
        store.held(1, KEYS[:50], 0),
    )


def test_an_allocation_failing_anywhere_in_a_record_leaves_a_usable_store() -> None:
    testcapi = pytest.importorskip("_testcapi")  # CPython's allocation hooks
    reference = PyPrefixStore()
    reference.record(1, KEYS[:50], 100)
    reference.record(0, KEYS, 10)
    failed = 0
    for first in range(40):  # allocations [first, first + count) of the record fail
        for count in range(1, 6):
            store = native.PrefixStore()
            store.record(1, KEYS[:50], 100)
            testcapi.set_nomemory(first, first + count)
            try:
                store.record(0, KEYS, 10)
            except MemoryError:  # not SystemError: a shrink that failed after it kept it
                failed += 1
            finally:
                testcapi.remove_mem_hooks()
            store.record(0, KEYS, 10)  # done again in full: as if it never failed
            assert state(store) == state(reference), (first, count)
            store.forget(0)
            store.forget(1)
            assert len(store) == 0
    assert failed > 100  # the sweep reached the record's allocations


def test_count_of_a_never_recorded_slot_and_no_sequence_raises_type_error() -> None:
    store = native.PrefixStore()
    with pytest.raises(TypeError):  # was SystemError: the slot read over a pending error
        store.count(2**70, 5)
    with pytest.raises(TypeError):
        store.count(0, 5)


class Failing:
    def __index__(self) -> int:
        raise ZeroDivisionError


def test_a_slot_whose_index_raises_is_an_error_not_a_slot_never_recorded() -> None:
    store = native.PrefixStore()
    store.record(0, (1, 2), 10)
    with pytest.raises(ZeroDivisionError):
        store.trim(Failing(), 0)
    with pytest.raises(ZeroDivisionError):
        store.held(Failing(), (1, 2), 0)
    with pytest.raises(ZeroDivisionError):
        store.count(Failing(), (1, 2))
    # Past the C range or no integer at all: never recorded, as before.
    assert store.held(2**70, (1,), 0) == (0, None) and store.count(2**70, (1,)) == 0
    assert store.held("0", (1,), 0) == (0, None) and store.count("0", (1,)) == 0
    store.trim(2**70, 0)
    assert store.held(0, (1, 2), 0) == (2, 1)


def test_a_slot_calling_back_into_the_store_is_refused() -> None:
    store = native.PrefixStore()

    class Sneaky:
        def __index__(self) -> int:
            store.forget(0)
            return 0

    store.record(0, (1, 2), 10)
    for call in (
        lambda: store.trim(Sneaky(), 0),
        lambda: store.held(Sneaky(), (1, 2), 0),
        lambda: store.count(Sneaky(), (1, 2)),
    ):
        with pytest.raises(RuntimeError, match="re-entered"):
            call()
    assert store.held(0, (1, 2), 0) == (2, 1) and len(store) == 2

"""The native block store under hostile input: bounded memory, no leaks, no crash."""

from __future__ import annotations

import random
import sys
import tracemalloc

import pytest

native = pytest.importorskip("kinference.native._prefix")

TOP = 2**64 - 1


def test_a_huge_record_leaves_no_more_memory_than_its_bound_needs() -> None:
    store = native.PrefixStore()
    store.record(0, list(range(2_000)), 1_000)
    settled = sys.getsizeof(store)
    store.record(0, list(range(10**6, 10**6 + 300_000)), 1_000)  # 300k blocks at once
    assert len(store) == 1_000 and store.footprint([0]) == [1_000.0]
    assert sys.getsizeof(store) <= 2 * settled  # the tables shrank back after the trim


def test_one_hash_repeated_is_one_block() -> None:
    store = native.PrefixStore()
    store.record(3, (7,) * 100_000, 50)
    assert len(store) == 1 and store.footprint([3]) == [1.0]
    assert store.held(3, (7, 7, 7), 0) == (3, 0)  # each repeat refreshed it; deepest touch
    assert store.match((7, 8)) == {3: 1}


def test_slots_anywhere_in_the_c_range_and_beyond() -> None:
    store = native.PrefixStore()
    for slot in (0, 2**62, -(2**63), 2**63 - 1):
        store.record(slot, (1, 2), 10)
    assert list(store.match((1, 2))) == [0, 2**62, -(2**63), 2**63 - 1]  # order taken
    with pytest.raises(OverflowError):
        store.record(2**64, (1,), 10)
    assert not store.has(2**70) and store.footprint([2**70, -(2**70)]) == [0.0, 0.0]
    assert store.held(2**70, (1,), 0) == (0, None)
    store.forget(2**70)  # never recorded: nothing happens
    store.forget(2**62)
    assert list(store.match((1,))) == [0, -(2**63), 2**63 - 1]
    assert len(store) == 2


def test_many_slots_come_and_go_without_growing() -> None:
    store = native.PrefixStore()
    for slot in range(64):
        store.record(slot, (slot, 1), 10)
    full = sys.getsizeof(store)
    for round_ in range(50):
        for slot in range(64):
            store.forget(slot)
            store.record(slot + 1000 * round_, (slot, 1), 10)  # new numbers, old places
        for slot in range(64):
            store.forget(slot + 1000 * round_)
            store.record(slot, (slot, 1), 10)
    assert sys.getsizeof(store) <= 2 * full
    assert len(store) == 64  # blocks 0-63 (1 among them)


@pytest.mark.parametrize("bad", [-1, 2**64, -(2**70), 2**100, "7", 1.0, None])
def test_a_record_of_anything_but_a_64_bit_hash_is_refused_and_changes_nothing(
    bad: object,
) -> None:
    store = native.PrefixStore()
    store.record(0, (1, 2), 10)
    with pytest.raises(ValueError, match=r"\[0, 2\*\*64\)"):
        store.record(0, (5, 6, bad, 8), 10)
    assert store.match((5,)) == {} and store.held(0, (1, 2), 0) == (2, 1)
    assert store.match((bad, 1)) == {}  # reads find no such block
    assert store.held(0, (1, bad), 0) == (1, 0)
    assert store.count(0, (bad, 2)) == 1  # held: only block 2
    assert len(store) == 2  # counting drops nothing


def test_keys_from_index_and_other_sequences() -> None:
    class Hash:
        def __init__(self, value: int) -> None:
            self.value = value

        def __index__(self) -> int:
            return self.value

    store = native.PrefixStore()
    store.record(0, [Hash(TOP), Hash(3)], 10)
    store.record(1, range(5), 10)
    assert store.match((TOP, 3)) == {0: 2}
    assert store.match(range(5)) == {1: 5}


def test_a_key_calling_back_into_the_store_is_refused() -> None:
    store = native.PrefixStore()

    class Sneaky:
        def __index__(self) -> int:
            store.forget(0)  # would free what the running call walks
            return 1

    store.record(0, range(100), 1_000)
    with pytest.raises(RuntimeError, match="re-entered"):
        store.record(0, (Sneaky(),), 10)
    with pytest.raises(RuntimeError, match="re-entered"):
        store.match((0, Sneaky(), 2))
    assert store.match(range(100)) == {0: 100} and len(store) == 100


def test_no_reference_or_memory_leaks_over_a_long_run() -> None:
    rng = random.Random(5)
    prompts = [tuple(rng.getrandbits(64) for _ in range(rng.randint(1, 300))) for _ in range(40)]
    tracemalloc.start()  # before the store: its every allocation is traced
    try:
        store = native.PrefixStore()

        def run(steps: int) -> None:
            for _ in range(steps):
                prompt, slot = rng.choice(prompts), rng.randrange(8)
                store.record(slot, prompt, 2_000)
                store.match(prompt)
                store.held(slot, prompt, 0)
                store.footprint(list(range(8)))
                if rng.random() < 0.05:
                    store.count(slot, prompt)
                if rng.random() < 0.01:
                    store.forget(slot)

        run(2_000)  # every table at its working size
        counts = [sys.getrefcount(prompt) for prompt in prompts]
        first = [sys.getrefcount(prompt[0]) for prompt in prompts]
        before = tracemalloc.get_traced_memory()[0] - sys.getsizeof(store)
        run(5_000)
        after = tracemalloc.get_traced_memory()[0] - sys.getsizeof(store)
    finally:
        tracemalloc.stop()
    assert [sys.getrefcount(prompt) for prompt in prompts] == counts
    assert [sys.getrefcount(prompt[0]) for prompt in prompts] == first
    # What is allocated beyond the store's own tables (which it counts) does not grow.
    assert abs(after - before) < 16 * 1024  # 0 bytes where measured


def test_a_slot_changing_the_footprint_list_is_read_as_it_was() -> None:
    store = native.PrefixStore()
    store.record(4, (1, 2, 3), 10)
    slots: list[object] = []

    class Shrinking:
        def __index__(self) -> int:
            slots.clear()  # the list under the running call
            return 4

    slots.extend([Shrinking(), 4, 4])
    assert store.footprint(slots) == [3.0, 3.0, 3.0]

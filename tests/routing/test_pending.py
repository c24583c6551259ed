"""Pending prefill by prefix blocks: what a new prompt shares of the prefills in progress."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kinference.routing.pending import PendingPrefix, PendingPrefixes, waited_prefill
from kinference.routing.table import WorkerTable


def chain(prefix: tuple[int, ...], length: int, salt: int) -> tuple[int, ...]:
    """Chained-looking hashes: `prefix`, then blocks of their own (parted for good)."""
    return prefix + tuple(salt * 1_000_003 + i for i in range(length - len(prefix)))


def test_a_prompt_sharing_the_prefill_in_progress_shares_its_blocks() -> None:
    doc = chain((), 100, 1)
    entry = PendingPrefix(doc, start=0, tokens=1600.0, block_tokens=16.0)
    assert entry.shared_tokens((*doc[:100], 7, 8)) == 1600.0  # the whole prefill
    assert entry.shared_tokens(doc[:40] + chain((), 10, 9)) == 40 * 16.0
    assert entry.shared_tokens(chain((), 100, 2)) == 0.0  # another prompt
    assert entry.shared_tokens(()) == 0.0


def test_only_the_blocks_the_pick_computes_are_shared() -> None:
    """A pick that found 30 blocks cached prefills from block 30 on: a prompt parting at
    block 20 shares none of its prefill."""
    doc = chain((), 60, 3)
    entry = PendingPrefix(doc, start=30, tokens=30 * 16.0, block_tokens=16.0)
    assert entry.shared_tokens(doc[:20] + chain((), 40, 4)) == 0.0
    assert entry.shared_tokens(doc[:45] + chain((), 5, 5)) == 15 * 16.0


@given(common=st.integers(0, 80), start=st.integers(0, 80), mine=st.integers(1, 80))
def test_shared_tokens_are_the_common_blocks_past_the_start(
    common: int, start: int, mine: int
) -> None:
    base = chain((), 80, 6)
    hashes = base[:mine]
    other = base[:common] + chain((), 40, 7)
    entry = PendingPrefix(hashes, start=start, tokens=1e9, block_tokens=2.0)
    expected = max(min(common, mine, len(other)) - start, 0) * 2.0
    assert entry.shared_tokens(other) == expected


def test_entries_come_and_go_with_their_picks() -> None:
    pending = PendingPrefixes()
    doc = chain((), 10, 8)
    pending.add(3, "a", PendingPrefix(doc, 0, 160.0, 16.0))
    pending.add(3, "b", PendingPrefix(doc, 0, 160.0, 16.0))
    assert pending.shared(3, doc) == 320.0
    assert pending.pop(3, "a") is not None
    assert pending.pop(3, "a") is None  # twice: nothing
    assert pending.shared(3, doc) == 160.0
    assert pending.pop(3, "b") is not None
    assert pending.shared(3, doc) == 0.0 and not pending.holds(3)


def test_the_table_counts_keyed_prefills_once() -> None:
    table = WorkerTable()
    slot = table.slot("10.0.0.1:8000")
    doc = chain((), 10, 9)
    table.start_prefill(slot, "pick", PendingPrefix(doc, 0, 160.0, 16.0))
    assert table.pending_prefill[slot] == 160.0
    assert table.shared_pending(slot, doc) == 160.0
    table.end_prefill(slot, "pick")
    table.end_prefill(slot, "pick")  # the first token, then the release: once
    assert table.pending_prefill[slot] == 0.0


class _Draining:
    """A table whose drained and shared prefill are given (`waited_prefill` reads them)."""

    def __init__(self, done: float, shared: float) -> None:
        self.pending_prefill = np.zeros(1)
        self.done, self.shared, self.asked = done, shared, 0

    def prefill_done(self, slot: int, ms_per_token: float) -> float:
        return self.done

    def shared_pending(self, slot: int, hashes: tuple[int, ...]) -> float:
        self.asked += 1
        return self.shared


odd_floats = st.floats() | st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan])


@given(
    pending=st.floats(min_value=0.0, exclude_min=True) | st.sampled_from([1.0, 1e-300, math.inf]),
    done=odd_floats,
    shared=odd_floats,
)
def test_waited_prefill_is_all_not_yet_computed_shared_or_not(
    pending: float, done: float, shared: float
) -> None:
    """What the prompt shares of the pending prefill is waited for too (h107): the engine
    computes those blocks before its first token, in turn with the rest."""
    table = _Draining(done, shared)
    got = waited_prefill(table, 0, pending, per_token=0.1)
    assert repr(got) == repr(max(pending - done, 0.0))
    assert table.asked == 0

"""Touches that repeat whole earlier touches re-point them (`WorkerAges._runs`), and ones
that repeat an earlier touch's head split it there (`WorkerAges._split`): over random
touches, repeats, removals and rankings, the same ranks, survivals and counts as the
per-block form (`per_block_ages`, the oracle)."""

from __future__ import annotations

import operator
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from kinference.kvcache import ageing
from kinference.kvcache.ageing import MAX_ALIASES, WorkerAges
from tests.kvcache import per_block_ages as oracle

_BLOCK_MAX = 300
# Each step's choices are read from one byte string of STEP_BYTES (one hypothesis draw a
# step instead of ~20): VALUE_BYTES a value (a choice byte, then two bytes of the value) and
# one byte before each element of a list (whether it goes on). As `st.integers` does, the
# ends of a range come up often (a choice byte of 15 mod 16: the top); lists are as long as
# `st.lists`'s (AVERAGE elements on average, at most their max). A string runs out as zeros:
# the lowest values and empty lists, so failures still shrink towards small steps.
VALUE_BYTES = 3
AVERAGE = 5
STEP_BYTES = 192  # a step reads at most 174


class _Reader:
    """Values read off one step's bytes, as the strategies named in each method would."""

    def __init__(self, raw: bytes) -> None:
        self._raw = raw
        self._at = 0

    def _take(self, count: int) -> bytes:
        taken = self._raw[self._at : self._at + count]
        self._at += count
        return taken.ljust(count, b"\0")

    def integer(self, low: int, high: int) -> int:
        """`st.integers(low, high)`."""
        choice, *value = self._take(VALUE_BYTES)
        if choice % 16 == 15:
            return high
        return low + int.from_bytes(bytes(value), "little") % (high - low + 1)

    def boolean(self) -> bool:
        """`st.booleans()`."""
        return self._take(1)[0] & 1 == 1

    def pick(self, items: list[list[int]]) -> list[int]:
        """`st.sampled_from(items)`."""
        return items[self.integer(0, len(items) - 1)]

    def more(self, size: int, min_size: int, max_size: int) -> bool:
        """Whether a list of `size` elements goes on (`st.lists`'s sizes)."""
        if size < min_size:
            return True
        return size < max_size and self._take(1)[0] >= 256 // (AVERAGE + 1)

    def blocks(self, max_size: int) -> list[int]:
        """`st.lists(st.integers(0, 300), max_size=max_size)`."""
        drawn: list[int] = []
        while self.more(len(drawn), 0, max_size):
            drawn.append(self.integer(0, _BLOCK_MAX))
        return drawn

    def picks(self, history: list[list[int]]) -> list[list[int]]:
        """`st.lists(st.sampled_from(history), min_size=1, max_size=3)`."""
        drawn: list[list[int]] = []
        while self.more(len(drawn), 1, 3):
            drawn.append(self.pick(history))
        return drawn


def _next_touch(data: _Reader, history: list[list[int]]) -> list[int]:
    """A fresh touch, or earlier touches again (whole, cut short, or in another order; the
    last one first as a chat turn's history), with or without more blocks after them (new,
    held, or repeated ones)."""
    if not history or data.integer(0, 2) == 0:
        start = data.integer(0, 280)
        return list(range(start, start + data.integer(1, 50)))
    picks = data.picks(history)
    if data.boolean():  # a chat turn: the last touch again, first
        picks = [history[-1], *picks[1:]]
    blocks = [block for touch in picks for block in touch]
    cut = data.integer(0, 4)
    if cut == 4:  # a head of them only (another conversation on the same system prompt)
        blocks = blocks[: data.integer(0, len(blocks))]
    elif cut:
        blocks = blocks[: max(len(blocks) - cut, 0)]
    return blocks + data.blocks(20)


def _same(ages: WorkerAges, reference: oracle.WorkerAges, asked: list[int]) -> None:
    assert oracle.resolved(ages) == reference.touched
    assert (oracle.numbered(ages.live), oracle.numbered(ages.evicted), ages.touches) == (
        reference.live,
        reference.evicted,
        reference.touches,
    )
    assert np.array_equal(ages.ranks(asked), reference.ranks(asked))
    for evictions in range(0, len(reference.touched) + 2, 7):
        depth = len(asked)
        assert ages.surviving(asked, depth, evictions) == reference.surviving(
            asked, depth, evictions
        )


@pytest.mark.parametrize("small", [0, ageing._SMALL, 10**6])
@settings(max_examples=120, deadline=None)
@given(st.data())
def test_runs_rank_and_count_as_the_per_block_form_does(small: int, data: st.DataObject) -> None:
    """`small`: touches of up to that many blocks to key leave their touches in Python,
    the others in numpy (0: all in numpy, as before; 10**6: all in Python)."""
    with mock.patch.object(ageing, "_SMALL", small):
        _random_steps(data)


def _random_steps(data: st.DataObject) -> None:
    ages, reference = WorkerAges(), oracle.WorkerAges()
    history: list[list[int]] = []
    steps = data.draw(st.integers(1, 25))
    raw = data.draw(st.binary(min_size=steps * STEP_BYTES, max_size=steps * STEP_BYTES))
    for step in range(steps):
        read = _Reader(raw[step * STEP_BYTES : (step + 1) * STEP_BYTES])
        if history and read.integer(0, 4) == 0:
            gone = read.blocks(30)
            gone += read.pick(history)[-read.integer(0, 20) :]
            note(f"removed {gone}")
            ages.removed(gone)
            reference.removed(gone)
        else:
            blocks = _next_touch(read, history)
            note(f"touch {blocks}")
            ages.touch(blocks)
            reference.touch(blocks)
            history.append(blocks)
        asked = read.pick(history) + read.blocks(10)
        _same(ages, reference, asked)


def test_a_chat_turn_repeating_its_history_repoints_it() -> None:
    """A turn's match is the previous turn's whole prompt: one run re-pointed, no block
    re-keyed; then a removal from its tail and a partial touch split it as before."""
    ages, reference = WorkerAges(), oracle.WorkerAges()
    history = list(range(100))
    for step in range(5):
        turn = history + list(range(1000 + 10 * step, 1010 + 10 * step))
        for touched in (history, turn[len(history) :], turn):
            ages.touch(touched)
            reference.touch(touched)
        history = turn
    assert len(ages.alias) > 0
    ages.removed(history[-3:])
    reference.removed(history[-3:])
    ages.touch(history[5:40])
    reference.touch(history[5:40])
    _same(ages, reference, [*history, 7, 99999])


def test_a_long_chain_of_turns_keeps_its_aliases_bounded() -> None:
    """An agent session's turns each repeat the last whole: past `MAX_ALIASES` re-points
    the chain is keyed anew once, and ranks and counts stay the per-block form's."""
    ages, reference = WorkerAges(), oracle.WorkerAges()
    history = list(range(20))
    for step in range(3 * MAX_ALIASES):
        turn = [*history, 100_000 + step]
        for touched in (history, turn):
            ages.touch(touched)
            reference.touch(touched)
        history = turn
        assert len(ages.alias) <= MAX_ALIASES
    _same(ages, reference, [*history[-40:], 7, 99999])


def test_conversations_on_one_system_prompt_split_its_touch_instead_of_rekeying_it() -> None:
    """Four conversations on one worker, their turns interleaved: each turn's match is the
    shared system prompt, last used by another conversation's turn, then its own history.
    The system prompt's touch is split and re-pointed, and the turn's history re-pointed
    too: only the new blocks and the other conversation's tail are keyed; the same ranks,
    survivals and counts as the per-block form throughout."""
    ages, reference = WorkerAges(), oracle.WorkerAges()
    system = list(range(200))
    histories = [list[int]() for _ in range(4)]
    rekeyed = []
    for turn in range(6):
        for c, history in enumerate(histories):
            new = [10_000 * (c + 1) + 100 * turn + i for i in range(20)]
            match = [*system, *history]
            before = [ages.touched.get(b) for b in system]
            for touched in (match, new, [*match, *new]):  # sent, the events, finished
                ages.touch(touched)
                reference.touch(touched)
            rekeyed.append(sum(map(operator.ne, before, map(ages.touched.get, system))))
            histories[c] = [*history, *new]
            _same(ages, reference, [*system, *histories[c], *histories[(c + 1) % 4], 7])
    assert rekeyed[0] == len(system)  # the first turn stores it
    assert rekeyed[1:] == [0] * (len(rekeyed) - 1)  # then split and re-pointed, never keyed
    ages.removed(histories[0][-5:])
    reference.removed(histories[0][-5:])
    _same(ages, reference, [*system, *histories[0], *histories[3]])


def test_a_tail_split_again_and_again_past_the_ids_between_touches() -> None:
    """A touch whose tail's head is taken again and again: each split's tail takes the next
    id, until none is left before the next touch's (`_STRIDE`); then that touch is keyed
    per block, as before. The per-block form's ranks and counts throughout."""
    ages, reference = WorkerAges(), oracle.WorkerAges()
    segments = [list(range(100 * s, 100 * s + 16)) for s in range(ageing._STRIDE + 3)]
    whole = [block for segment in segments for block in segment]
    ages.touch(whole)
    reference.touch(whole)
    for step, segment in enumerate(segments[:-1]):
        taken = [*segment, 50_000 + step]
        ages.touch(taken)
        reference.touch(taken)
        _same(ages, reference, [*whole, 7])

"""The unknown batch's doubt (`readings.unseen_wait`) lets the first join past the most seen
running go: that join teaches the batch, which a doubt that stops it never learns."""

from __future__ import annotations

import pytest

from kinference.routing.readings import FREE_JOINS_PAST_MOST, unseen_wait
from kinference.routing.scorers import ttft as ttft_module
from kinference.routing.table import WorkerTable
from tests.routing.plugin_helpers import context
from tests.routing.test_ttft import PRIOR, frozen, scorer


def _seen_running(table: WorkerTable, slot: int, running: int) -> None:
    table.set_engine(slot, waiting=0, running=running, kv_usage=0.1, scraped_at=0.0)


def _winner(table: WorkerTable) -> list[int]:
    """The candidate each form of the scorer picks (a hit on slot 0, cold on slot 1)."""
    ctx = context(2, prompt_tokens=1000, cached=[900, 0], table=table)
    kept, picks = ttft_module.SMALL_CANDIDATES, []
    for candidates in (kept, 0):  # the small form, then the vector form
        ttft_module.SMALL_CANDIDATES = candidates
        try:
            picks.append(int(scorer().score(ctx).argmax()))
        finally:
            ttft_module.SMALL_CANDIDATES = kept
    return picks


def test_the_first_join_past_the_most_seen_running_pays_no_doubt() -> None:
    """vllm-64 (64-slot engines, h107's trace): a system-prompt question cached on an engine
    running 3, as many as any engine was seen running, would be its 4th. The batch taken as
    any of 3..8 cost it an expected ~111 ms, twice in the cost, and it went cold (~90 ms
    against a ~20-ms hit) — every such hit, so the pool's most never rose. Now it goes:
    on time, its report raises the floor (the next 5th goes too); queued, a ceiling. A
    second join past the most before that report is still doubted (few-slots' 4 slots)."""
    table = WorkerTable(clock=frozen)
    slots = table.slots(f"10.0.0.{i}:8000" for i in range(2)).tolist()
    _seen_running(table, slots[0], 3)
    _seen_running(table, slots[1], 0)
    assert FREE_JOINS_PAST_MOST == 1.0
    assert unseen_wait(4.0, 3.0, 8.0, PRIOR.prior_service_ms) == 0.0
    assert unseen_wait(5.0, 3.0, 8.0, PRIOR.prior_service_ms) > 0.0
    assert _winner(table) == [0, 0]  # h107: [1, 1], the hit sent cold
    table.add_inflight(slots[0], 1)  # that join, not reported yet: a 5th is doubted
    assert _winner(table) == [1, 1]
    table.observed_batch(slots[0], 4.0, queued=False)  # it came on time
    assert table.most_seen_of(slots) == pytest.approx(4.0)
    assert _winner(table) == [0, 0]

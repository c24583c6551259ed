"""The pool's one probe past the most seen running (`readings.is_probe`): priced without the
unknown batch's doubt while none is in flight and none as far came late."""

from __future__ import annotations

import numpy as np

from kinference.routing.decision import LocalChoice
from kinference.routing.journal import NullJournal
from kinference.routing.learning import Learning
from kinference.routing.prefix import PrefixIndex
from kinference.routing.rates import Rates
from kinference.routing.readings import unseen_wait
from kinference.routing.scorers import ttft as ttft_module
from kinference.routing.scorers.ttft import TtftScorer
from kinference.routing.scorers.ttft_config import TtftConfig
from kinference.routing.table import WorkerTable
from tests.routing.plugin_helpers import MODEL, context


def frozen() -> float:
    return 100.0


def _choices(table: WorkerTable) -> list[tuple[int, list[float]]]:
    """(the winner, `ctx.probes`) of a hit joining its engine as the 4th, by every form."""
    found = []
    for native in (True, False):
        for candidates in (ttft_module.SMALL_CANDIDATES, 0):  # small form, vector form
            ttft_module.SMALL_CANDIDATES, kept = candidates, ttft_module.SMALL_CANDIDATES
            try:
                ctx = context(2, prompt_tokens=1600, cached=[1500, 0], table=table)
                score = TtftScorer(TtftConfig(), Rates(), native=native).score(ctx)
                assert ctx.probes is not None
                found.append((int(score.argmax()), ctx.probes.tolist()))
            finally:
                ttft_module.SMALL_CANDIDATES = kept
    assert len(set(map(str, found))) == 1, found  # the forms agree
    return found[:1]


def test_one_join_past_the_most_seen_is_the_pools_probe_and_pays_no_doubt() -> None:
    """vllm-64 at 6 req/s: a hit whose engine runs 3, the pool seen running 3 at most, paid
    `unseen_wait` (2/3 of a slot's service / 6, ~111 ms, twice) and went cold. As the
    pool's probe it stays; with another probe in flight, or one as far that came late,
    it pays the doubt again."""
    table = WorkerTable(clock=frozen)
    slots = table.slots(f"10.0.0.{i}:8000" for i in range(2)).tolist()
    table.set_engine(slots[0], waiting=0, running=3, kv_usage=0.1, scraped_at=0.0)
    table.set_engine(slots[1], waiting=0, running=0, kv_usage=0.1, scraped_at=0.0)
    assert unseen_wait(4.0, 3.0, 8.0, 2000.0) > 100.0
    assert _choices(table) == [(0, [1.0, 0.0])]
    table.start_probe(slots[1], "elsewhere")  # the pool's probe is in flight
    assert _choices(table) == [(1, [0.0, 0.0])]
    table.end_probe("elsewhere")
    table.end_probe("elsewhere")  # again: a no-op
    assert table.probing.tolist()[:2] == [0.0, 0.0]
    assert _choices(table) == [(0, [1.0, 0.0])]
    table.probe_late[slots[1]] = 4.0  # a probe joining a 4th came late: no more at 4
    assert _choices(table) == [(1, [0.0, 0.0])]
    table.set_engine(slots[0], waiting=0, running=4, kv_usage=0.1, scraped_at=1.0)
    table.add_inflight(slots[0], 1)  # seen running 4, 5 on it now: a 6th is 2 past
    ctx = context(2, prompt_tokens=1600, cached=[1500, 0], table=table)
    TtftScorer(TtftConfig(), Rates()).score(ctx)
    assert ctx.probes is not None and not np.any(ctx.probes)


def test_a_probe_is_in_flight_until_its_first_token_and_a_late_one_ends_the_probing() -> None:
    learn = Learning(WorkerTable(), PrefixIndex(10_000), NullJournal())
    table = learn.table
    table.slots(f"10.0.0.{i}:8000" for i in range(2))
    table.set_engine(1, waiting=0, running=3, kv_usage=0.1, scraped_at=1.0)

    def probe(sequences: float) -> LocalChoice:
        return LocalChoice("10.0.0.1:8000", 1, "default/pool", MODEL, prompt_tokens=500.0,
                           predicted_ttft_ms=60.0, sequences=sequences, probe=True,
                           ended_before=table.ended.item(1))  # fmt: skip

    fourth = probe(4.0)
    learn.picked(fourth)
    assert table.probing.tolist()[:2] == [0.0, 1.0]
    learn.first_token(fourth, 65.0)  # on time, none ended: the floor rises, no probe left
    assert table.probing.tolist()[:2] == [0.0, 0.0]
    assert table.batch_floor[1] == 4.0 and np.isnan(table.probe_late[1])
    fifth = probe(5.0)
    learn.picked(fifth)
    learn.first_token(fifth, 200.0)  # late, but no certain queue: no ceiling either
    assert table.probing[1] == 0.0 and table.probe_late[1] == 5.0
    assert np.isnan(table.batch_ceiling[1]) and table.batch_floor[1] == 4.0
    released = probe(5.0)
    learn.picked(released)
    learn.released_before_first_token(released)
    assert table.probing[1] == 0.0
    table.forget_batch(1)
    assert np.isnan(table.probe_late[1])


def test_no_probe_where_another_holder_has_a_free_slot() -> None:
    """Mixed 6 (h121): a hit whose engine ran as many as the pool was ever seen running,
    priced as a free probe, tied with another holder of the same prefix with room to
    spare, and small terms sent it to the full one, where it queued (525 ms against 20).
    A probe pays no doubt only where it saves `PROBE_SAVING_MS` of the request's own
    prefill against every candidate that takes it without doubt or queue: here none."""
    table = WorkerTable(clock=frozen)
    slots = table.slots(f"10.0.0.{i}:8000" for i in range(3)).tolist()
    for slot, running in zip(slots, (3, 1, 0), strict=True):
        table.set_engine(slot, waiting=0, running=running, kv_usage=0.1, scraped_at=0.0)
    for native in (True, False):
        for candidates in (ttft_module.SMALL_CANDIDATES, 0):  # small form, vector form
            ttft_module.SMALL_CANDIDATES, kept = candidates, ttft_module.SMALL_CANDIDATES
            try:
                model = TtftScorer(TtftConfig(), Rates(), native=native)
                both = context(3, prompt_tokens=1600, cached=[1500, 1500, 0], table=table)
                assert int(model.score(both).argmax()) == 1  # the holder with room
                assert both.probes is not None and not np.any(both.probes)
                alone = context(3, prompt_tokens=1600, cached=[1500, 0, 0], table=table)
                assert int(model.score(alone).argmax()) == 0  # needed: a hit, not cold
                assert alone.probes is not None and alone.probes.tolist() == [1.0, 0.0, 0.0]
            finally:
                ttft_module.SMALL_CANDIDATES = kept

"""The pool's one probe past the most seen running (`doubt.is_probe`): priced without the
unknown batch's doubt while none is in flight and none as far came late."""

from __future__ import annotations

import numpy as np
import pytest

from kinference.routing.decision import LocalChoice, RouteQuery
from kinference.routing.doubt import unseen_wait
from kinference.routing.features import EngineReading
from kinference.routing.journal import NullJournal
from kinference.routing.learning import Learning
from kinference.routing.prefix import PrefixIndex
from kinference.routing.rates import Rates
from kinference.routing.router import Router
from kinference.routing.scorers import ttft as ttft_module
from kinference.routing.scorers.ttft import TtftScorer
from kinference.routing.scorers.ttft_config import TtftConfig
from kinference.routing.table import WorkerTable
from tests.routing.plugin_helpers import MODEL, context, pool_router
from tests.routing.plugin_helpers import system_query as query


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


def _filtered_pool(late: bool) -> tuple[Router, list[str], RouteQuery]:
    """Mixed 6, 60 s (h148): A ran 4 and its probe past 4 came late (`late`; else it is
    still in flight), then two documents filled A's KV cache (the saturation filter leaves
    it out); B, running 4 too, holds the next prompt's prefix, C is idle and cold."""
    endpoints = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"]
    now = 100.0
    router = pool_router(endpoints, now)
    system = "You answer questions about the tides. " * 40
    router.remote_picked(endpoints[1], router.route(query(system, 0)).prefix_hashes)
    for endpoint, running, kv in zip(endpoints, (4.0, 4.0, 0.0), (0.95, 0.1, 0.0), strict=True):
        router.engine_reading(endpoint, True, EngineReading(0.0, running, kv, scraped_at=now))
    if late:
        router.table.probe_came_late(router.table.slot(endpoints[0]), 5.0)
    else:
        router.table.start_probe(router.table.slot(endpoints[0]), "in flight")
    return router, endpoints, query(system, 1)


@pytest.mark.parametrize("late", [True, False])
def test_the_pool_remembers_its_probe_on_a_worker_the_filters_leave_out(late: bool) -> None:
    """`probe_limit` and the batch evidence read the pool's ready workers serving the
    model, not only the candidates the filters kept: with A out (its KV cache full), a
    5th on B is no probe while A's probe as far came late or is in flight (B's 5th queued
    for 1,381 ms there). In all three forms (C, small list, vector)."""
    for native in (True, False):
        for candidates in (ttft_module.SMALL_CANDIDATES, 0):  # small form, vector form
            ttft_module.SMALL_CANDIDATES, kept = candidates, ttft_module.SMALL_CANDIDATES
            try:
                router, endpoints, asked = _filtered_pool(late)
                if not native:
                    for scorer, _ in router.policy.pipeline.scorers:
                        if isinstance(scorer, TtftScorer):
                            scorer._native = None
                choice = router.route(asked).local
                assert choice is not None and choice.endpoint != endpoints[0]  # filtered
                assert not choice.probe, (native, candidates, choice)
            finally:
                ttft_module.SMALL_CANDIDATES = kept


def test_without_the_left_out_workers_probe_the_hit_is_the_pools_probe() -> None:
    """The control of the test above: A's probe neither late nor in flight, B's 5th is the
    pool's probe (the scenario does reach `is_probe`)."""
    router, endpoints, asked = _filtered_pool(late=True)
    router.table.probe_late[router.table.slot(endpoints[0])] = np.nan
    choice = router.route(asked).local
    assert choice is not None and choice.endpoint == endpoints[1] and choice.probe

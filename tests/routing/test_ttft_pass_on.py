"""The TTFT a pick passes on to the requests picked to its worker while it runs
(`TtftConfig.pass_on_weight`, `WorkerTable.arrival_rate`)."""

from __future__ import annotations

import math

import pytest

from kinference.routing.rates import Rates
from kinference.routing.scorers import ttft as ttft_module
from kinference.routing.scorers.ttft import TtftScorer
from kinference.routing.scorers.ttft_config import TtftConfig
from kinference.routing.table import ARRIVAL_WINDOW_S, WorkerTable
from tests.clock import FakeClock
from tests.routing.plugin_helpers import MODEL, context

ONE = 1.0 / (ARRIVAL_WINDOW_S * 1000.0)  # one pick's share of a rate a millisecond


def test_picks_raise_their_workers_arrival_rate_and_it_decays_with_time() -> None:
    clock = FakeClock()
    table = WorkerTable(clock=clock)
    a, b = table.slot("a:1"), table.slot("b:1")
    table.add_inflight(a, 1)
    table.add_inflight(a, 2)  # two picks at once (a remote replica's delta)
    assert table.arrival_rate[[a, b]].tolist() == pytest.approx([3 * ONE, 0.0])
    clock.advance(ARRIVAL_WINDOW_S)
    table.add_inflight(a, -1)  # a release is no arrival, nor does it decay anything
    assert table.arrival_rate.item(a) == pytest.approx(3 * ONE)
    table.add_inflight(b, 1)  # every worker decays by the time since the last pick
    decayed = 3 * ONE * math.exp(-1.0)
    assert table.arrival_rate[[a, b]].tolist() == pytest.approx([decayed, ONE])
    clock.advance(-5.0)  # a clock read late: no growth
    table.add_inflight(b, 1)
    assert table.arrival_rate[[a, b]].tolist() == pytest.approx([decayed, 2 * ONE])


def test_a_small_hit_on_a_popular_holder_goes_to_a_quieter_worker() -> None:
    """Two workers running 2 each, each sequence adding 10 ms to a first token, requests
    running ~2.7 s (4 s observed once, beside the prior): a 200-token hit (20 ms of prefill
    saved at the prior rate, 10 more of its compute share) on the worker picked 2 a second
    lately passes ~54 ms on to the requests picked there while it runs, against ~14 ms on
    the worker picked 0.5 a second: the quieter one takes it. Without the term the holder
    kept it. Every form alike."""
    clock = FakeClock()
    table, rates = WorkerTable(clock=clock), Rates()
    ctx = context(2, prompt_tokens=2_000, cached=[200, 0], table=table)
    holder, quiet = int(ctx.slots[0]), int(ctx.slots[1])
    for slot, picks in ((holder, 20), (quiet, 5)):
        table.add_inflight(slot, picks)
        table.add_inflight(slot, 2 - picks)  # 2 still running
    for _ in range(20):
        rates.observe_busy(MODEL, 2.0, 20.0)
    for slot in (holder, quiet):
        rates.observe_service(slot, MODEL, 4_000.0)
    assert rates.busy_ms(MODEL) == pytest.approx(10.0)
    for candidates in (ttft_module.SMALL_CANDIDATES, 0):  # the small form, the vector
        ttft_module.SMALL_CANDIDATES, kept = candidates, ttft_module.SMALL_CANDIDATES
        try:
            for native in (True, False):
                model = TtftScorer(TtftConfig(decode_pressure_ms=0), rates, native=native)
                assert model.score(ctx).tolist()[1] == 1.0
                unpassed = TtftScorer(
                    TtftConfig(decode_pressure_ms=0, pass_on_weight=0), rates, native=native
                )
                assert unpassed.score(ctx).tolist()[0] == 1.0
        finally:
            ttft_module.SMALL_CANDIDATES = kept

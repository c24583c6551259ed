"""Moving a prefix group to a faster engine: the demand counts, the credit, its gates."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kinference.routing.plugins.base import PickContext
from kinference.routing.rates import Rates
from kinference.routing.scorers.regroup import CHECKPOINTS, PrefixDemand, Regroup, RegroupConfig
from kinference.routing.scorers.ttft import TtftConfig, TtftScorer
from tests.clock import FakeClock
from tests.routing.plugin_helpers import MODEL, context

HASHES = tuple(range(1, 101))  # a prompt of 100 blocks: checkpoints 16, 32 and 64
PROMPT, SHARED = 1600.0, 1500.0  # tokens: the group's prefix, then a question


def learned(rates: Rates, slot: int, base_ms: float, ms_per_token: float) -> None:
    for tokens in (200, 1800, 600, 1400, 1000) * 6:
        rates.observe_prefill(slot, MODEL, tokens, base_ms + tokens * ms_per_token)


def group_pick(cached: list[float], waits: list[float] | None = None) -> PickContext:
    ctx = context(len(cached), prompt_tokens=PROMPT, cached=cached)
    ctx.hashes = HASHES
    ctx.predicted_wait_ms = None if waits is None else np.array(waits)
    return ctx


def regroup(rates: Rates, clock: FakeClock, **config: float) -> Regroup:
    return Regroup(RegroupConfig(**config), rates, clock=clock)  # type: ignore[arg-type]


def seen(term: Regroup, times: int, clock: FakeClock, every_s: float = 1.0) -> None:
    for _ in range(times):
        term.demand.seen(HASHES)
        clock.advance(every_s)


def test_demand_counts_picks_at_each_checkpoint_and_decays_with_the_horizon() -> None:
    clock = FakeClock()
    demand = PrefixDemand(horizon_s=10.0, size=100, clock=clock)
    for _ in range(3):
        demand.seen(HASHES)
    assert demand.expected(HASHES, 100) == pytest.approx(3.0)  # at 64 blocks
    assert demand.expected(HASHES, 15) == 0.0  # no checkpoint within 15 blocks
    other = HASHES[:40] + tuple(range(1000, 1060))  # shares the first 40 blocks only
    assert demand.expected(other, 100) == 0.0  # its 64th block was never seen
    assert demand.expected(other, 40) == pytest.approx(3.0)  # its 32nd was, 3 times
    clock.advance(10.0)
    assert demand.expected(HASHES, 100) == pytest.approx(3.0 / math.e)


def test_demand_forgets_the_least_recent_prefixes_past_its_size() -> None:
    clock = FakeClock()
    demand = PrefixDemand(horizon_s=10.0, size=len(CHECKPOINTS), clock=clock)
    demand.seen(tuple(range(1, 1025)))  # every checkpoint: the whole size
    other = tuple(range(2001, 2101))
    demand.seen(other)  # three new keys push the three oldest out
    assert demand.expected(other, 100) == pytest.approx(1.0)
    assert demand.expected(tuple(range(1, 1025)), 1024) == pytest.approx(1.0)
    assert demand.expected(tuple(range(1, 1025)), 16) == 0.0


def test_an_idle_faster_engine_is_credited_with_the_groups_faster_hits() -> None:
    rates, clock = Rates(), FakeClock()
    learned(rates, 0, 30.0, 0.1)  # the holder: twice as slow
    learned(rates, 1, 15.0, 0.05)
    term = regroup(rates, clock)
    seen(term, 4, clock)
    credits = term.credits(group_pick([SHARED, 0.0], waits=[0.0, 0.0]), 100 / PROMPT)
    expected = sum(math.exp(-k / 30.0) for k in range(1, 5))
    saving = (30.0 - 15.0) + (PROMPT - SHARED) * (0.1 - 0.05)
    assert credits is not None
    assert credits[0] == 0.0
    assert credits[1] == pytest.approx(expected * saving, rel=0.02)


@pytest.mark.parametrize(
    ("fast_base", "fast_per_token", "waits"),
    [
        (25.0, 0.08, [0.0, 0.0]),  # alike within the margin
        (15.0, 0.05, [0.0, 40.0]),  # the faster engine is busy: it would queue
    ],
)
def test_no_credit_for_alike_or_busy_engines(
    fast_base: float, fast_per_token: float, waits: list[float]
) -> None:
    rates, clock = Rates(), FakeClock()
    learned(rates, 0, 30.0, 0.1)
    learned(rates, 1, fast_base, fast_per_token)
    term = regroup(rates, clock)
    seen(term, 10, clock)
    assert term.credits(group_pick([SHARED, 0.0], waits=waits), 100 / PROMPT) is None


def test_no_credit_while_a_speed_is_unknown_or_the_group_new_or_turned_off() -> None:
    rates, clock = Rates(), FakeClock()
    learned(rates, 0, 30.0, 0.1)  # the other engine's speed is not learned
    term = regroup(rates, clock)
    seen(term, 10, clock)
    assert term.credits(group_pick([SHARED, 0.0], waits=[0.0, 0.0]), 100 / PROMPT) is None
    learned(rates, 1, 15.0, 0.05)
    fresh = regroup(rates, clock)  # the group never seen before
    assert fresh.credits(group_pick([SHARED, 0.0], waits=[0.0, 0.0]), 100 / PROMPT) is None
    off = regroup(rates, clock, horizon_s=0.0)
    seen(off, 10, clock)
    assert off.credits(group_pick([SHARED, 0.0], waits=[0.0, 0.0]), 100 / PROMPT) is None


def test_the_ttft_scorer_moves_a_busy_group_off_a_slow_engine_and_not_a_new_one() -> None:
    rates, clock = Rates(), FakeClock()
    learned(rates, 0, 30.0, 0.1)
    learned(rates, 1, 15.0, 0.05)
    term = regroup(rates, clock)
    scorer = TtftScorer(TtftConfig(), rates, term)
    first = group_pick([SHARED, 0.0])
    assert scorer.score(first).tolist()[0] == 1.0  # a new group stays on its hit
    seen(term, 8, clock, every_s=0.5)
    scores = scorer.score(group_pick([SHARED, 0.0])).tolist()
    assert scores[1] == 1.0 > scores[0]  # worth one cold prefill on the faster engine
    plain = TtftScorer(TtftConfig(), rates).score(group_pick([SHARED, 0.0])).tolist()
    assert plain[0] == 1.0 > plain[1]  # without the term the slow hit wins

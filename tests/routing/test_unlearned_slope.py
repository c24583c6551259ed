"""The prefill pending on a worker whose slope is not learned yet drains at its slowest
learned peer's slope, not at their mean (`ttft._peers_or`, `ttft_small._small_peers_or` and
the C form alike): at the mean, an unknown slow engine of a mixed pool had a document taken
as done while it still prefilled, and a hit sent there waited for the rest (h92's trace).
The worker's own prefill stays at the peers' mean."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kinference.routing.rates import Rates
from kinference.routing.scorers import ttft as ttft_module
from kinference.routing.scorers import ttft_small
from kinference.routing.scorers.ttft import TtftConfig, TtftScorer
from kinference.routing.table import WorkerTable
from tests.clock import FakeClock
from tests.routing.plugin_helpers import MODEL, context

FAST, SLOW = 0.05, 0.10  # ms a prompt token
LENGTHS = (200, 1800, 600, 1400, 1000) * 6  # a spread of lengths: slope and base both fit


def learn(rates: Rates, slot: int, per_token: float, base: float = 10.0) -> None:
    for tokens in LENGTHS:
        rates.observe_prefill(slot, MODEL, tokens, base + tokens * per_token)
    rates.observe_service(slot, MODEL, 1000.0 if per_token == FAST else 3000.0)


def forms(rates: Rates) -> tuple[TtftScorer, TtftScorer]:
    """The scorer with its C form where built, and with the Python reference."""
    config = TtftConfig()
    return TtftScorer(config, rates), TtftScorer(config, rates, native=False)


def test_the_unlearned_slope_is_the_slowest_peers_and_the_rest_their_mean() -> None:
    values = np.array([FAST, math.nan, SLOW, math.nan])
    assert ttft_module._peers_or(values, 0.1, slowest=True).tolist() == [FAST, SLOW, SLOW, SLOW]
    mean = (FAST + SLOW) / 2
    assert ttft_module._peers_or(values, 0.1).tolist() == [FAST, mean, SLOW, mean]
    array = np.array([FAST, math.nan, SLOW])  # slot 3 beyond the learned array
    slots = [0, 1, 2, 3]
    assert ttft_small._small_peers_or(array, slots, 0.1, slowest=True) == [FAST, SLOW, SLOW, SLOW]
    assert ttft_small._small_peers_or(array, slots, 0.1) == [FAST, mean, SLOW, mean]
    # nothing learned among the candidates: the prior, either way
    assert ttft_small._small_peers_or(None, slots, 0.1, slowest=True) == [0.1] * 4
    nothing = np.full(4, math.nan)
    assert ttft_module._peers_or(nothing, 0.1, slowest=True).tolist() == [0.1] * 4


def test_an_unknown_workers_own_prefill_stays_at_the_peers_mean() -> None:
    """Two learned (fast, slow), one not: a cold 2000-token prompt there is predicted at the
    peers' mean slope, fixed cost and service time, in every form (priced at the slowest,
    cold documents crowded onto the learned engines' caches and evicted each other)."""
    rates = Rates(alpha=0.2)
    ctx = context(3, prompt_tokens=2000)
    fast, slow, _ = ctx.slots.tolist()
    learn(rates, fast, FAST)
    learn(rates, slow, SLOW, base=20.0)
    for model in forms(rates):
        predicted, wait = model.predict(ctx)
        assert predicted[2] == pytest.approx(15.0 + 2000 * (FAST + SLOW) / 2, rel=0.02)
        assert predicted[0] == pytest.approx(10.0 + 2000 * FAST, rel=0.02)
        assert wait.tolist() == [0.0, 0.0, 0.0]
        parts = model.parts(ctx.table, ctx.slots, MODEL, ctx.signals.waiting)
        assert parts.service[2] == pytest.approx((parts.service[0] + parts.service[1]) / 2)
        assert parts.drain.tolist() == pytest.approx([FAST, SLOW, SLOW], rel=0.02)


def test_a_learned_worker_drains_at_its_own_rate() -> None:
    """Pending prefill on learned workers drains at their own slopes, the slowest peer's
    only where the worker's is not known."""
    clock = FakeClock(100.0)
    table = WorkerTable(clock=clock)
    rates = Rates(alpha=0.2)
    ctx = context(3, prompt_tokens=100, table=table)
    fast, slow, unknown = ctx.slots.tolist()
    learn(rates, fast, FAST)
    learn(rates, slow, SLOW)
    for slot in (fast, slow, unknown):
        table.add_pending_prefill(slot, 3000)
    for model in forms(rates):
        _, wait = model.predict(ctx)
        assert wait.tolist() == pytest.approx([3000 * FAST, 3000 * SLOW, 3000 * SLOW])


def test_a_document_prefilling_on_an_unknown_worker_drains_at_the_slowest_rate() -> None:
    """h92's trace (mixed, 6 req/s): a hit went to an engine not learned yet, prefilling a
    12k-token document picked 0.8 s before. At the peers' mean (0.075 ms a token) the
    document was taken as done and the hit as no wait; the engine was a slow one and the
    hit waited for the document's rest. At the slowest peer's rate 4000 tokens are left."""
    clock = FakeClock(100.0)
    table = WorkerTable(clock=clock)
    rates = Rates(alpha=0.2)
    ctx = context(3, prompt_tokens=1600, cached=[0, 0, 1500], table=table)
    fast, slow, unknown = ctx.slots.tolist()
    learn(rates, fast, FAST)
    learn(rates, slow, SLOW)
    table.add_pending_prefill(unknown, 12_000)
    clock.now += 0.8
    for model in forms(rates):
        _, wait = model.predict(ctx)
        assert wait.tolist() == pytest.approx([0.0, 0.0, 4000 * SLOW])
        # the hit's 400 ms wait is worth more than the cold prefill on the fast worker
        assert int(np.argmax(model.score(ctx))) == 0

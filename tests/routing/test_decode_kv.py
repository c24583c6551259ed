"""The decode slow-down per running KV token (`routing.rates`, `WorkerTable.running_tokens`)
and its price in the TTFT cost (`scorers.ttft`), in the C, Python and vector forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kinference.itl_layout import MIDPOINTS_MS, bucket
from kinference.routing.decision import LocalChoice
from kinference.routing.inflight import InFlight
from kinference.routing.journal import NullJournal
from kinference.routing.learning import Learning, Served
from kinference.routing.plugins.base import PickContext
from kinference.routing.prefix import PrefixIndex
from kinference.routing.rates import MAX_MS_PER_KV_TOKEN, Rates
from kinference.routing.scorers import ttft as ttft_module
from kinference.routing.scorers.ttft import TtftScorer
from kinference.routing.scorers.ttft_config import TtftConfig
from kinference.routing.scorers.ttft_small import capped_decode
from kinference.routing.table import WorkerTable
from tests.routing.plugin_helpers import MODEL, context

SLOPE = 0.002  # ms of a decode step per running KV token
ALONE = {0: 8.0, 1: 16.0}  # each worker's own step, ms: the second twice as slow


def frozen() -> float:
    return 100.0


def choice(slot: int, **fields: object) -> LocalChoice:
    return LocalChoice(f"10.0.0.{slot}:8000", slot, "default/pool", MODEL, **fields)  # type: ignore[arg-type]


def test_one_slope_is_learned_across_workers_each_with_its_own_speed() -> None:
    """The slow worker also ran more KV tokens: a fit through all samples alike would take
    its slowness for load (here 0.0047 ms a token); about each worker's own means, the
    slope is the engines' and the intercepts their speeds."""
    rates = Rates()
    for kv in (1000.0, 3000.0, 2000.0, 4000.0) * 5:
        for slot, extra in ((0, 0.0), (1, 2000.0)):
            tokens = kv + extra
            assert rates.observe_decode(slot, MODEL, tokens, ALONE[slot] + SLOPE * tokens, 50)
    slope, reply = rates.decode(MODEL)
    assert slope == pytest.approx(SLOPE)
    assert reply == pytest.approx(51.0)  # the gaps and the first token
    assert rates.decode_alone_ms(0, MODEL) == pytest.approx(ALONE[0])
    assert rates.decode_alone_ms(1, MODEL) == pytest.approx(ALONE[1])
    rates.forget(1)
    assert math.isnan(rates.decode_alone_ms(1, MODEL))


def test_no_slope_from_one_load_level_and_none_below_zero_or_past_the_bound() -> None:
    rates = Rates(TtftConfig(prior_decode_ms_per_kv_token=0.001))
    for _ in range(10):
        rates.observe_decode(0, MODEL, 2000.0, 12.0, 50)
        rates.observe_decode(1, MODEL, 100.0, 30.0, 50)  # apart, but each alone
    assert rates.decode(MODEL)[0] == 0.001  # the prior: no spread within a worker
    faster = Rates()
    for kv in (1000.0, 5000.0) * 5:
        faster.observe_decode(0, MODEL, kv, 40.0 - kv / 1000.0, 50)  # faster when fuller
    assert faster.decode(MODEL)[0] == 0.0
    steep = Rates()
    for kv in (1000.0, 5000.0) * 5:
        steep.observe_decode(0, MODEL, kv, kv, 50)
    assert steep.decode(MODEL)[0] == MAX_MS_PER_KV_TOKEN


def test_short_replies_and_odd_numbers_teach_nothing() -> None:
    rates = Rates()
    assert not rates.observe_decode(0, MODEL, 1000.0, 12.0, 3)
    assert not rates.observe_decode(0, MODEL, math.nan, 12.0, 50)
    assert not rates.observe_decode(0, MODEL, 1000.0, math.inf, 50)
    assert not rates.observe_decode(0, MODEL, -1.0, 12.0, 50)
    assert rates.decode(MODEL) == (0.0, pytest.approx(math.nan, nan_ok=True))


def test_the_requests_in_flight_carry_their_prompt_tokens_on_their_worker() -> None:
    table = WorkerTable()
    inflight = InFlight(table, ttl_s=60.0)
    slot = table.slot("10.0.0.0:8000")
    inflight.add(1, choice(slot, prompt_tokens=1500.0), "t")
    inflight.add(2, choice(slot, prompt_tokens=math.inf), "t")  # unknown: counts none
    inflight.add(3, choice(slot, prompt_tokens=0.1 + 0.2), "t")
    assert table.running_tokens[slot] == pytest.approx(1500.3)
    inflight.release(1)
    inflight.release(2)
    assert table.running_tokens[slot] == pytest.approx(0.3)
    inflight.release(3)
    assert table.running_tokens[slot] == 0.0  # nothing in flight: no rounding left


def test_a_final_report_teaches_the_slope_from_its_itl_buckets() -> None:
    """Each reply's gap against its own prompt and the others' KV tokens, the mean of at
    its pick and at its end (released first, it no longer counts itself there)."""
    table = WorkerTable()
    learn = Learning(table, PrefixIndex(10_000), NullJournal())
    slot = table.slot("10.0.0.0:8000")
    for others, own in ((0.0, 1000.0), (6000.0, 2000.0)) * 3:
        gap = ALONE[0] + SLOPE * (others + own)  # 10 and 24 ms: midpoints 7.5 and 25
        counts = [0] * 15
        counts[bucket(gap)] = 60
        table.add_inflight(slot, 1)
        table.add_running_tokens(slot, others)
        picked = choice(slot, prompt_tokens=own, running_tokens=others)
        learn.final(picked, Served(int(own), 0, tuple(counts), 50.0, 900.0))
        table.add_running_tokens(slot, -others)
        table.add_inflight(slot, -1)
    slope, reply = learn.rates.decode(MODEL)
    assert slope == pytest.approx((MIDPOINTS_MS[bucket(24.0)] - MIDPOINTS_MS[bucket(10.0)]) / 7000)
    assert reply == 61.0


def decode_learned(rates: Rates, slope: float = SLOPE, reply: float = 100.0) -> None:
    rates._decode[MODEL] = (slope, reply)


def scored(rates: Rates, ctx: object, **config: float) -> list[list[float]]:
    """The scores of every form: C and Python small forms, and the vector form."""
    answers = []
    for candidates in (ttft_module.SMALL_CANDIDATES, 0):
        ttft_module.SMALL_CANDIDATES, kept = candidates, ttft_module.SMALL_CANDIDATES
        try:
            for native in (True, False):
                model = TtftScorer(TtftConfig(**config), rates, native=native)  # type: ignore[arg-type]
                answers.append(model.score(ctx).tolist())  # type: ignore[arg-type]
        finally:
            ttft_module.SMALL_CANDIDATES = kept
    return answers


def chat_on_a_busy_worker(learned: bool = True) -> tuple[WorkerTable, PickContext, int, Rates]:
    """A chat turn with 300 of 2000 tokens cached on the first of two workers, which runs 2
    requests holding 8000 KV tokens (two documents); the second idle. The slope learned
    (`decode_learned`) unless `learned` is False."""
    table = WorkerTable(clock=frozen)
    ctx = context(2, prompt_tokens=2000, cached=[300, 0], table=table)
    busy = int(ctx.slots[0])
    table.add_inflight(busy, 2)
    table.add_running_tokens(busy, 8000.0)
    rates = Rates()
    if learned:
        decode_learned(rates)
    return table, ctx, busy, rates


def test_a_hit_on_a_worker_whose_kv_tokens_slow_its_decode_loses_at_most_what_it_saves() -> None:
    """A chat turn with 300 of 2000 tokens cached on a worker running 8000 KV tokens (two
    documents) and the other worker idle: the documents would slow each of its ~100 tokens
    by 16 ms, more than its hit saves (~30 ms), so the term is capped at the saving: the
    holder is priced as if cold (its edge left is the share of its smaller own prefill), and
    a worker it saves nothing on gets no decode term. Without a slope the term is 0."""
    _, ctx, _, rates = chat_on_a_busy_worker(learned=False)
    h151 = {"decode_cap_above_ms": 0.0}  # every candidate capped at its saving
    before = scored(rates, ctx, decode_pressure_ms=0, compute_weight=0, blocking_weight=0)
    for scores in before:
        assert scores[0] == 1.0  # nothing learned: the hit wins
    decode_learned(rates)
    model = TtftScorer(TtftConfig(decode_pressure_ms=0), rates)
    per_kv_token, *_ = model.decode_costs(ctx)
    assert per_kv_token * 8000.0 > 300 * 1000.0 / TtftConfig().prior_prefill_tokens_per_s
    bare = {"decode_pressure_ms": 0.0, "compute_weight": 0.0, "blocking_weight": 0.0}
    for scores in scored(rates, ctx, **bare, **h151):
        assert scores == pytest.approx([1.0, 1.0], rel=1e-12)  # priced cold: a tie
    for scores in scored(rates, ctx, decode_pressure_ms=0, **h151):
        assert scores[0] == 1.0 and scores[1] > before[0][1]
    for scores in scored(rates, ctx, decode_pressure_ms=0, decode_weight=0):
        assert scores[0] == 1.0


def test_the_cold_candidates_carry_no_decode_term() -> None:
    """Nothing cached anywhere: the cap is 0 everywhere, so running KV tokens change no
    score (cold spreading is the other terms' business)."""
    table = WorkerTable(clock=frozen)
    doc = context(2, prompt_tokens=6000, table=table)
    table.add_running_tokens(int(doc.slots[0]), 30000.0)
    rates = Rates()
    decode_learned(rates)
    priced = scored(rates, doc, decode_cap_above_ms=0)
    unpriced = scored(rates, doc, decode_weight=0)
    for got, want in zip(priced, unpriced, strict=True):
        assert got == want


def test_the_small_and_vector_forms_price_the_decode_alike() -> None:
    table = WorkerTable(clock=frozen)
    ctx = context(5, prompt_tokens=1200, cached=[0, 600, 1200, 0, 300], table=table)
    for i, slot in enumerate(ctx.slots.tolist()):
        table.add_inflight(slot, i)
        table.add_running_tokens(slot, 1700.0 * i)
    rates = Rates()
    decode_learned(rates, 0.0031, 87.0)
    answers = scored(rates, ctx, decode_cap_above_ms=0)
    for scores in answers[1:]:
        assert scores == pytest.approx(answers[0], rel=1e-12)
    unpriced = scored(rates, ctx, decode_weight=0)[0]
    assert int(np.argmax(unpriced)) == 2  # the full hit, on a worker running 3400 tokens
    assert int(np.argmax(answers[0])) == 2  # capped at what it saves: still the full hit
    assert answers[0][0] > unpriced[0]  # ... by less against the idle worker
    priced = answers[0]  # the busiest worker dearer against the idle one
    assert priced[4] / priced[0] < unpriced[4] / unpriced[0]


def test_a_short_hit_is_priced_uncapped_and_a_long_one_keeps_its_cap() -> None:
    """At the default (`decode_cap_above_ms` 60): a chat whose hit saves 30 ms on a worker
    running 8000 KV tokens carries the whole term and goes to the idle worker; a document
    whose hit saves 500 ms there keeps it (its term capped at the saving), and its cold
    candidate (now running one request) carries its running tokens' term uncapped."""
    table, chat, _, rates = chat_on_a_busy_worker()
    idle = int(chat.slots[1])
    for scores in scored(rates, chat, decode_pressure_ms=0):
        assert scores[1] == 1.0 and scores[0] < 1.0
    doc = context(2, prompt_tokens=6000, cached=[5000, 0], table=table)
    table.add_inflight(idle, 1)
    table.add_running_tokens(idle, 2000.0)
    h151 = scored(rates, doc, decode_pressure_ms=0, decode_cap_above_ms=0)[0]
    for scores in scored(rates, doc, decode_pressure_ms=0):
        assert scores[0] == 1.0 and scores[1] < h151[1]  # the hit's term alike, capped


def test_a_cap_at_a_multiple_of_the_saving_gives_up_a_hit_for_more_than_it_saves() -> None:
    """Every candidate capped (`decode_cap_above_ms` 0) at twice its saving: the chat's
    30-ms hit on the busy worker is priced 30 ms above cold, so the idle worker wins;
    at once its saving (h151) the two tie on the bare costs."""
    _, ctx, _, rates = chat_on_a_busy_worker()
    bare = {"decode_pressure_ms": 0.0, "compute_weight": 0.0, "blocking_weight": 0.0}
    for scores in scored(rates, ctx, decode_cap_above_ms=0, decode_cap_multiple=2, **bare):
        assert scores[1] == 1.0 and scores[0] < 1.0
    for scores in scored(rates, ctx, decode_cap_above_ms=0, decode_cap_multiple=1, **bare):
        assert scores == pytest.approx([1.0, 1.0], rel=1e-12)


def test_a_short_hits_term_beyond_its_cap_counts_by_the_idle_share_of_its_batch() -> None:
    """`capped_decode`: a short hit (or a cold candidate) carries its saving's cap plus what
    lies beyond it times the idle share of its batch; a long hit its cap whatever the load."""
    assert capped_decode(240.0, 30.0, 60.0, 1.0, 1.0) == 240.0  # idle: uncapped
    assert capped_decode(240.0, 30.0, 60.0, 1.0, 0.0) == 30.0  # full: h151's cap
    assert capped_decode(240.0, 30.0, 60.0, 1.0, 0.25) == 30.0 + 210.0 * 0.25
    assert capped_decode(240.0, 0.0, 60.0, 1.0, 0.5) == 120.0  # cold: half its term
    assert capped_decode(240.0, 500.0, 60.0, 1.0, 1.0) == 240.0  # long hit, under its cap
    assert capped_decode(900.0, 500.0, 60.0, 1.0, 1.0) == 500.0  # long hit: capped, idle or not


@pytest.mark.parametrize("running", [8, 12])
def test_a_short_hit_on_a_full_holder_is_priced_as_h151_and_spreads_from_a_light_one(
    running: int,
) -> None:
    """The chat's 30-ms hit on a worker running 8000 KV tokens: with 2 of its 8 slots
    taken the term is mostly uncapped and the idle worker wins (light load: spread); with
    its batch full (8, or 12 queued) the idle share is 0 and every form prices it exactly
    as h151's cap at the saving does (heavy load: the hit is kept at its cold cost)."""
    table, chat, busy, rates = chat_on_a_busy_worker()
    for scores in scored(rates, chat, decode_pressure_ms=0):
        assert scores[1] == 1.0 and scores[0] < 1.0
    light = scored(rates, chat, decode_pressure_ms=0, decode_cap_above_ms=0)
    assert light[0][0] == 1.0  # h151 kept the hit even on the lightly loaded holder
    table.add_inflight(busy, running - 2)
    h151 = scored(rates, chat, decode_pressure_ms=0, decode_cap_above_ms=0)
    scaled = scored(rates, chat, decode_pressure_ms=0)
    for got, want in zip(scaled, h151, strict=True):
        assert got == pytest.approx(want, rel=1e-12)

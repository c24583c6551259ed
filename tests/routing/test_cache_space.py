"""The cache-space term: the share of a request's new blocks that would evict held ones."""

from __future__ import annotations

import math

import pytest

from kinference.routing.rates import Rates
from kinference.routing.scorers.cache_space import spill
from kinference.routing.scorers.ttft import TtftConfig, TtftScorer
from tests.routing.plugin_helpers import MODEL, context

DOCUMENT = tuple(range(1, 121))  # a 1,900-token prompt's 120 index blocks


def test_an_idle_fast_worker_holding_one_document_with_room_takes_the_cold_prompt() -> None:
    """h116's mixed 6 seed 1 pick: a cold 120-block prompt; the idle fast worker holds one
    document (764 blocks) beside a worker holding 1,000, so it has room: it pays no
    cache-space share, and its faster prefill wins over the slow worker's (which held
    only a system prompt). Main charged it 764/1000 of its prefill and sent the prompt
    to the slow worker (served 215 ms, the run's p90)."""
    rates = Rates()
    ctx = context(3, prompt_tokens=1900)
    ctx.hashes = DOCUMENT
    held, fast, slow = (int(slot) for slot in ctx.slots)
    for slot, ms_per_token in ((held, 0.052), (fast, 0.052), (slow, 0.067)):
        for tokens in (400, 1600):
            rates.observe_prefill(slot, MODEL, tokens, 15.0 + tokens * ms_per_token)
    ctx.table.add_pending_prefill(held, 12_000)  # a document being prefilled there
    ctx.footprint = [1000.0, 764.0, 100.0]
    assert spill(ctx) == [pytest.approx(1.0), 0.0, 0.0]
    model = TtftScorer(TtftConfig(), rates)
    for native in (True, False):
        scores = TtftScorer(TtftConfig(), rates, native=native).score(ctx).tolist()
        assert max(range(3), key=scores.__getitem__) == 1, scores
    predicted, _ = model.predict(ctx)
    assert predicted[1] < predicted[2]


def test_the_fullest_candidate_pays_for_what_it_would_evict_and_no_more() -> None:
    """Capacity not learned: the most any candidate holds. A document onto the fullest
    pays for all of it; onto one holding less, for what does not fit beside it; onto one
    holding a little, for no more than it holds; onto an empty cache, nothing."""
    ctx = context(4, prompt_tokens=12_000)
    ctx.hashes = tuple(range(1, 761))  # 760 blocks
    ctx.footprint = [1000.0, 764.0, 100.0, 0.0]
    got = spill(ctx)
    assert got == pytest.approx([1.0, 524 / 760, 0.0, 0.0])
    ctx.footprint = [100.0, 0.0, 0.0, 0.0]
    assert spill(ctx) == pytest.approx([100 / 760, 0.0, 0.0, 0.0])


def test_a_learned_capacity_prices_the_overflow_and_teaches_its_peers() -> None:
    ctx = context(3, prompt_tokens=1900, cached=[0, 950, 0])
    ctx.hashes = DOCUMENT
    ctx.footprint = [1500.0, 1500.0, 1480.0]
    ctx.capacity = [1536.0, 1536.0, math.nan]  # the third takes its peers' 1,536
    # 120 new blocks: 84 do not fit; half of them cached on the second: 24 of 60
    assert spill(ctx) == pytest.approx([84 / 120, 24 / 60, 64 / 120])
    ctx.capacity = [50_000.0, math.nan, math.nan]  # a large cache: room everywhere
    assert spill(ctx) == [0.0, 0.0, 0.0]


def test_nothing_new_nothing_known_or_no_blocks_pays_nothing() -> None:
    ctx = context(2, prompt_tokens=1900, cached=[1900, 0])
    ctx.hashes = DOCUMENT
    ctx.footprint = [1000.0, 1000.0]
    assert spill(ctx) == [0.0, 1.0]
    ctx.footprint = None
    assert spill(ctx) is None
    ctx.footprint, ctx.hashes = [1000.0, 1000.0], ()
    assert spill(ctx) == [0.0, 0.0]
    ctx.hashes, ctx.prompt_tokens = DOCUMENT, 0.0
    assert spill(ctx) == [0.0, 0.0]

"""The estimated-TTFT scorer: its terms, its units, the learned rates and the priors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kinference.routing.doubt import MAX_DOUBT_STEPS, MOST_SEEN_FOR_DOUBT, unseen_wait
from kinference.routing.pending import PendingPrefix
from kinference.routing.rates import MIN_TOKENS_FOR_SLOPE, Rates
from kinference.routing.scorers import ttft as ttft_module
from kinference.routing.scorers import ttft_small
from kinference.routing.scorers.ttft import TtftScorer
from kinference.routing.scorers.ttft_config import TtftConfig
from kinference.routing.table import WorkerTable
from tests.clock import FakeClock
from tests.routing.plugin_helpers import MODEL, context

PRIOR = TtftConfig()
PER_TOKEN = 1000.0 / PRIOR.prior_prefill_tokens_per_s  # ms per uncached token


def frozen() -> float:
    """A clock that stands still: pending prefill does not drain between two lines."""
    return 100.0


def scorer(rates: Rates | None = None, **config: float) -> TtftScorer:
    return TtftScorer(TtftConfig(**config), rates or Rates())  # type: ignore[arg-type]


def test_idle_workers_with_nothing_cached_predict_the_prior_prefill_alike() -> None:
    predicted, wait = scorer().predict(context(3, prompt_tokens=2000))
    expected = PRIOR.prior_prefill_base_ms + 2000 * PER_TOKEN
    assert predicted.tolist() == pytest.approx([expected] * 3)
    assert wait.tolist() == [0.0, 0.0, 0.0]


def test_cached_tokens_are_not_prefilled_again() -> None:
    predicted, _ = scorer().predict(context(2, prompt_tokens=2000, cached=[1500, 0]))
    assert predicted[1] - predicted[0] == pytest.approx(1500 * PER_TOKEN)


def test_a_full_batch_queues_the_request_for_a_slot() -> None:
    table = WorkerTable(clock=frozen)
    ctx = context(2, prompt_tokens=100, cached=[100, 0], table=table)
    for _ in range(8):  # the prior batch: the cached worker is full, one more waits
        table.add_inflight(int(ctx.slots[0]), 1)
    predicted, wait = scorer().predict(ctx)
    drain = PRIOR.prior_service_ms / PRIOR.prior_batch
    assert wait[0] == pytest.approx(drain)  # one batch slot to free up
    assert predicted[0] > predicted[1]  # 100 cached tokens do not buy a queue


def test_pending_prefill_is_waited_for_at_the_learned_rate() -> None:
    table = WorkerTable(clock=frozen)
    ctx = context(2, prompt_tokens=100, table=table)
    table.add_pending_prefill(int(ctx.slots[0]), 3000)
    _, wait = scorer().predict(ctx)
    assert wait.tolist() == pytest.approx([3000 * PER_TOKEN, 0.0])


def test_pending_prefill_drains_while_it_is_computed() -> None:
    """A 3000-token document picked 120 ms ago at 0.1 ms a token is 1200 tokens in: the
    request waits for the 1800 left; once another prefill ends, its tokens count as done
    (the engine computed those first), and a new stretch starts from nothing done."""
    clock = FakeClock(100.0)
    table = WorkerTable(clock=clock)
    ctx = context(2, prompt_tokens=100, table=table)
    slot = int(ctx.slots[0])
    table.add_pending_prefill(slot, 3000)
    clock.now += 0.120
    model = scorer()
    for form in (model._predict_small, model._predict_vector):
        _, wait, *_ = form(ctx)
        assert wait.tolist() == pytest.approx([1800 * PER_TOKEN, 0.0])
    table.add_pending_prefill(slot, 500)  # a second prompt, queued behind the rest
    table.add_pending_prefill(slot, -3000)  # the document's first token
    assert table.prefill_done(slot, PER_TOKEN) == pytest.approx(0.0)  # 1200 < 3000 ended
    clock.now += 0.200  # 2000 more computed: 200 of them the second prompt's
    assert table.prefill_done(slot, PER_TOKEN) == pytest.approx(200.0)
    clock.now += 10.0  # long overdue: all of it done, never more than is pending
    assert table.prefill_done(slot, PER_TOKEN) == pytest.approx(500.0)
    _, wait = model.predict(ctx)
    assert wait.tolist() == pytest.approx([0.0, 0.0])
    table.add_pending_prefill(slot, -500)
    table.add_pending_prefill(slot, 700)  # a new stretch: nothing of it done yet
    _, wait = model.predict(ctx)
    assert wait.tolist() == pytest.approx([700 * PER_TOKEN, 0.0])


def test_a_hit_behind_a_document_almost_prefilled_stays_on_its_cache() -> None:
    """The worker holding the prompt is prefilling a 12k-token document: just picked, the
    hit would wait 1.2 s and a cold prefill elsewhere wins; 1.15 s on, 500 tokens are left
    and the hit wins again (the document is computed, not waiting to start)."""
    clock = FakeClock(100.0)
    table = WorkerTable(clock=clock)
    ctx = context(2, prompt_tokens=1600, cached=[1500, 0], table=table)
    table.add_pending_prefill(int(ctx.slots[0]), 12_000)
    model = scorer()
    assert int(np.argmax(model.score(ctx))) == 1
    clock.now += 1.150
    _, wait = model.predict(ctx)
    assert wait[0] == pytest.approx(500 * PER_TOKEN)
    assert int(np.argmax(model.score(ctx))) == 0


def test_decode_pressure_grows_with_the_square_of_occupancy() -> None:
    table = WorkerTable(clock=frozen)
    ctx = context(3, prompt_tokens=0, table=table)
    table.add_inflight(int(ctx.slots[1]), 4)
    table.add_inflight(int(ctx.slots[2]), 7)
    predicted, _ = scorer(decode_pressure_ms=80).predict(ctx)
    base = PRIOR.prior_prefill_base_ms
    assert predicted.tolist() == pytest.approx([base, base + 20, base + 80 * 49 / 64])


def test_an_engine_seen_full_gives_its_batch_and_queue() -> None:
    table = WorkerTable(clock=frozen)
    ctx = context(2, prompt_tokens=0, table=table)
    busy, idle = int(ctx.slots[0]), int(ctx.slots[1])
    # A queue standing a second in the readings: the batch is full.
    table.set_engine(busy, waiting=3, running=4, kv_usage=0.5, scraped_at=-1.0)
    table.set_engine(busy, waiting=3, running=4, kv_usage=0.5, scraped_at=0.0)
    table.set_engine(idle, waiting=0, running=30, kv_usage=0.1, scraped_at=0.0)
    ctx.signals = type(ctx.signals)(table.waiting.copy(), table.kv_usage.copy())
    _, wait = scorer().predict(ctx)
    # batch 4 (seen running 4 while 3 waited): 4 ahead of a new request; the other runs
    # 30 with nothing waiting, so it takes at least 31: no wait.
    assert wait.tolist() == pytest.approx([4 * PRIOR.prior_service_ms / 4, 0.0])


def test_behind_a_full_batch_the_wait_passed_on_counts_too() -> None:
    """Its cached prefix sits on a full engine: its own TTFT is lower there (a slot's wait
    against a cold prefill), but the slot it then holds is waited for by the requests
    after it; on the free engine it delays no one. The free engine wins."""
    table = WorkerTable(clock=frozen)
    ctx = context(2, prompt_tokens=6000, cached=[6000, 0], table=table)
    holder = int(ctx.slots[0])
    table.set_batch_limit(holder, 4.0)
    table.add_inflight(holder, 4)
    predicted, wait = scorer().predict(ctx)
    assert wait.tolist() == pytest.approx([PRIOR.prior_service_ms / 4, 0.0])
    assert predicted[0] < predicted[1]
    assert scorer(queue_weight=0.0).score(ctx).tolist()[0] == 1.0  # the TTFT alone
    for candidates in (ttft_module.SMALL_CANDIDATES, 0):  # both forms
        ttft_module.SMALL_CANDIDATES, kept = candidates, ttft_module.SMALL_CANDIDATES
        try:
            scores = scorer().score(ctx)
        finally:
            ttft_module.SMALL_CANDIDATES = kept
        assert scores[1] == 1.0
        cost = predicted[0] + PRIOR.queue_weight * wait[0]
        assert scores[0] == pytest.approx((predicted[1] + 0.5 * 6000 * PER_TOKEN) / cost)


def test_the_score_is_best_over_cost_the_cost_counting_a_share_of_the_prefill() -> None:
    ctx = context(2, prompt_tokens=2000, cached=[2000, 0])
    scores = scorer(compute_weight=0.5).score(ctx)
    assert scores[0] == 1.0
    assert ctx.predicted_ttft_ms is not None
    cost = ctx.predicted_ttft_ms[1] + 0.5 * 2000 * PER_TOKEN
    assert scores[1] == pytest.approx(ctx.predicted_ttft_ms[0] / cost)


def test_at_equal_ttft_the_cache_wins() -> None:
    """The cached worker is busy prefilling what the request shares: both promise the same
    TTFT, but only the other would compute the prompt again."""
    table = WorkerTable(clock=frozen)
    ctx = context(2, prompt_tokens=1000, cached=[1000, 0], table=table)
    table.add_pending_prefill(int(ctx.slots[0]), 1000)
    predicted, _ = scorer(decode_pressure_ms=0).predict(ctx)
    assert predicted[0] == pytest.approx(predicted[1])
    scores = scorer(decode_pressure_ms=0).score(ctx)
    assert scores[0] > scores[1]


def test_each_running_sequence_adds_the_busy_cost_up_to_the_batch() -> None:
    table = WorkerTable(clock=frozen)
    ctx = context(3, prompt_tokens=0, table=table)
    table.add_inflight(int(ctx.slots[1]), 3)
    table.add_inflight(int(ctx.slots[2]), 12)  # 8 run (the prior batch), 4 wait
    predicted, wait = scorer(decode_pressure_ms=0, prior_busy_ms_per_sequence=10).predict(ctx)
    base = PRIOR.prior_prefill_base_ms
    assert predicted.tolist() == pytest.approx([base, base + 30, wait[2] + base + 80])


def test_a_learned_busy_cost_sends_a_small_hit_to_an_idle_worker() -> None:
    """A 400-token cache hit on a worker running 6 does not beat an idle worker once each
    running sequence is known to add 10 ms to a first token; while unknown (0) it did."""
    table = WorkerTable(clock=frozen)
    ctx = context(2, prompt_tokens=2000, cached=[400, 0], table=table)
    table.add_inflight(int(ctx.slots[0]), 6)
    rates = Rates()
    assert scorer(rates, decode_pressure_ms=0).score(ctx).tolist()[0] == 1.0
    for _ in range(20):
        rates.observe_busy(MODEL, 6.0, 60.0)
    assert rates.busy_ms(MODEL) == pytest.approx(10.0)
    assert scorer(rates, decode_pressure_ms=0).score(ctx).tolist()[1] == 1.0


def test_the_busy_fit_goes_through_the_origin_and_ignores_a_lone_request() -> None:
    rates = Rates(TtftConfig(learning_rate=0.2, prior_busy_ms_per_sequence=3.0))
    assert rates.busy_ms(MODEL) == 3.0  # the prior until a sample
    rates.observe_busy(MODEL, 0.0, 500.0)  # alone on its worker: says nothing
    assert rates.busy_ms(MODEL) == 3.0
    for beside in (1.0, 4.0, 2.0, 6.0) * 10:
        rates.observe_busy(MODEL, beside, 8.0 * beside)
    assert rates.busy_ms(MODEL) == pytest.approx(8.0)
    rates.observe_busy(MODEL, 2.0, 5000.0)  # a queue it did not see: capped per sequence
    assert rates.busy_ms(MODEL) <= 50.0
    for _ in range(40):
        rates.observe_busy(MODEL, 3.0, -30.0)  # faster than the prefill fit: never below 0
    assert rates.busy_ms(MODEL) == 0.0


def test_learned_rates_replace_the_priors_per_worker() -> None:
    rates = Rates(TtftConfig(learning_rate=0.2))
    ctx = context(2, prompt_tokens=1000)
    slow = int(ctx.slots[1])
    for tokens in (200, 1800, 600, 1400, 1000) * 6:  # a worker twice the prior's time
        rates.observe_prefill(slow, MODEL, tokens, 30 + tokens * 2 * PER_TOKEN)
    predicted, _ = scorer(rates).predict(ctx)
    assert predicted[1] == pytest.approx(30 + 1000 * 2 * PER_TOKEN, rel=0.02)
    # The worker not learned yet is taken to be like its peers, not like the prior: a
    # pessimistic prior would never let it be tried.
    assert predicted[0] == pytest.approx(predicted[1])
    fast = int(ctx.slots[0])
    for tokens in (200, 1800, 600, 1400, 1000) * 6:
        rates.observe_prefill(fast, MODEL, tokens, 10 + tokens * PER_TOKEN / 2)
    predicted, _ = scorer(rates).predict(ctx)
    assert predicted[0] == pytest.approx(10 + 1000 * PER_TOKEN / 2, rel=0.02)


@settings(deadline=None)  # numpy's first calls are slow on a loaded machine
@given(
    base=st.floats(0, 200),
    per_token=st.floats(0.001, 2.0),
    tokens=st.lists(st.integers(0, 20_000), min_size=8, max_size=40),
)
@example(base=0.0, per_token=2.0, tokens=[0, 0, 0, 0, 0, 0, 0, 4])  # short prompts alone
def test_the_prefill_fit_recovers_a_linear_engine(
    base: float, per_token: float, tokens: list[int]
) -> None:
    # The slope with the prior's fixed cost right (a wrong one tilts the line by its fading
    # share, `test_rates.test_a_consistent_worker_is_learned_despite_the_prior`).
    rates, right = (
        Rates(TtftConfig(learning_rate=0.3)),
        Rates(TtftConfig(learning_rate=0.3, prior_prefill_base_ms=base)),
    )
    for count in tokens:
        rates.observe_prefill(0, MODEL, count, base + per_token * count)
        right.observe_prefill(0, MODEL, count, base + per_token * count)
    slope = rates.learned(MODEL, "prefill_ms_per_token", 0)
    intercept = rates.learned(MODEL, "prefill_base_ms", 0)
    spread = max(tokens) - min(tokens)
    if spread >= 2000 and max(tokens[-5:]) - min(tokens[-5:]) >= 500:  # recent spread: a fit
        fitted = right.learned(MODEL, "prefill_ms_per_token", 0)
        assert fitted == pytest.approx(per_token, rel=0.05, abs=1e-3)
    assert not math.isnan(intercept)
    # Whatever the spread, the prediction at the tokens seen is right, except while only
    # short prompts were seen: their time is all taken as fixed cost (by design, the slope
    # is not learned from them), so 4 tokens at 2 ms each are the mean of the samples.
    last = tokens[-1]
    if math.isnan(slope) and max(tokens) < MIN_TOKENS_FOR_SLOPE:
        return
    fitted_slope = 0.0 if math.isnan(slope) else slope
    assert intercept + fitted_slope * last == pytest.approx(base + per_token * last, rel=0.1, abs=5)


def test_service_time_is_a_moving_mean_and_forgotten_with_the_worker() -> None:
    rates = Rates(
        TtftConfig(learning_rate=0.5)
    )  # the prior (2000 ms) weighs as 2 samples of 0.5 at first
    rates.observe_service(3, MODEL, 1000)
    assert rates.learned(MODEL, "service_ms", 3) == 1500  # (0.5 * 2000 + 0.5 * 1000) / 1
    rates.observe_service(3, MODEL, 3000)
    assert rates.learned(MODEL, "service_ms", 3) == 2250  # weight 1: a moving mean
    rates.forget(3)
    assert math.isnan(rates.learned(MODEL, "service_ms", 3))
    assert np.isnan(rates.values(MODEL, "service_ms", np.array([3]), 8)).all()
    rates.observe_service(3, MODEL, 1000)  # the prior again, not the forgotten mean
    assert rates.learned(MODEL, "service_ms", 3) == 1500


def test_one_short_request_does_not_set_a_workers_service_time() -> None:
    """A warm-up's 2-token request held its slot 14 ms: the worker's service time, and
    through the peers' mean every unlearned worker's, stays near the prior (it was 14 ms:
    arrivals by Little's law 100x too many, slot waits 100x too short, h136); the worker's
    own samples take over as they come."""
    rates = Rates()
    rates.observe_service(2, MODEL, 14.0)
    assert rates.learned(MODEL, "service_ms", 2) > 0.6 * rates.prior_service_ms
    for _ in range(40):
        rates.observe_service(2, MODEL, 1200.0)
    assert rates.learned(MODEL, "service_ms", 2) == pytest.approx(1200.0, rel=0.01)


def test_pending_prefill_of_a_shared_prefix_is_waited_for_yet_its_holder_wins() -> None:
    """A concurrent request still prefilling the document this one asks about: its first
    token comes after those blocks are computed (vLLM's scheduler runs the prefill under
    way first), so they are a wait like other prompts' pending prefill; not this one's own
    prefill, so the holder still beats an engine that would prefill it all again."""
    table = WorkerTable(clock=frozen)
    doc = tuple(range(1, 201))  # 200 blocks of 16 tokens
    ctx = context(2, prompt_tokens=3300, cached=[3200, 0], table=table)
    ctx.hashes = (*doc, 999)
    holder = int(ctx.slots[0])
    table.start_prefill(holder, "first", PendingPrefix(doc, 0, 3200.0, 16.0))
    table.add_pending_prefill(holder, 500.0)  # another prompt's prefill: a wait
    model = scorer()
    for form in (model._predict_small, model._predict_vector):
        _, wait, *_ = form(ctx)
        assert wait.tolist() == pytest.approx([3700 * PER_TOKEN, 0.0])
    assert model.score(ctx).tolist()[0] == 1.0


def test_a_cold_prompt_goes_to_the_emptier_cache() -> None:
    """Nothing cached anywhere, rates a little apart: the fuller cache pays for the
    blocks the prompt would evict there."""
    rates = Rates()
    ctx = context(2, prompt_tokens=12_000)
    full, empty = int(ctx.slots[0]), int(ctx.slots[1])
    rates.observe_prefill(full, MODEL, 12_000, 600.0)  # learned a tenth faster
    rates.observe_prefill(empty, MODEL, 12_000, 660.0)
    ctx.footprint = [1500.0, 0.0]
    assert scorer(rates).score(ctx).tolist()[1] == 1.0
    ctx.footprint = [0.0, 0.0]
    assert scorer(rates).score(ctx).tolist()[0] == 1.0  # equal caches: the faster
    ctx.footprint = [1500.0, 0.0]
    assert scorer(rates, cache_space_weight=0).score(ctx).tolist()[0] == 1.0


def test_a_long_cold_prompt_goes_where_it_holds_up_the_fewest_arrivals() -> None:
    """A 12k-token document cached nowhere, one worker learned a tenth faster but running
    2 (by Little's law ~2 arrivals a service time, each held up behind the ~0.6 s prefill
    for half of it on average), the other idle: the idle one takes it. Without the term
    the faster one did (vllm-64: shared prompts cold, or waiting, behind a document
    prefilling on their holder). A short prompt holds up arrivals for a few ms: the
    faster worker keeps it."""
    rates, table = Rates(), WorkerTable(clock=frozen)
    ctx = context(2, prompt_tokens=12_000, table=table)
    busy, idle = int(ctx.slots[0]), int(ctx.slots[1])
    table.add_inflight(busy, 2)
    rates.observe_prefill(busy, MODEL, 12_000, 600.0)
    rates.observe_prefill(idle, MODEL, 12_000, 660.0)
    short = context(2, prompt_tokens=1_000, table=table)
    for candidates in (ttft_module.SMALL_CANDIDATES, 0):  # both forms
        ttft_module.SMALL_CANDIDATES, kept = candidates, ttft_module.SMALL_CANDIDATES
        try:
            for native in (True, False):  # the C form and the pure one
                model = TtftScorer(TtftConfig(decode_pressure_ms=0), rates, native=native)
                assert model.score(ctx).tolist()[1] == 1.0
                assert model.score(short).tolist()[0] == 1.0
                unblocked = TtftScorer(
                    TtftConfig(decode_pressure_ms=0, blocking_weight=0), rates, native=native
                )
                assert unblocked.score(ctx).tolist()[0] == 1.0
        finally:
            ttft_module.SMALL_CANDIDATES = kept


@settings(deadline=None)
@given(
    inflight=st.lists(st.integers(0, 20), min_size=2, max_size=12),
    readings=st.lists(
        st.one_of(st.none(), st.tuples(st.integers(0, 10), st.integers(0, 12))),
        min_size=12,
        max_size=12,
    ),
    learned=st.lists(st.one_of(st.none(), st.floats(0.01, 1.0)), min_size=12, max_size=12),
    cached=st.lists(st.floats(0, 3000), min_size=12, max_size=12),
    batches=st.lists(
        st.tuples(st.sampled_from(["none", "floor", "ceiling", "limit"]), st.integers(1, 40)),
        min_size=12,
        max_size=12,
    ),
    shared=st.lists(st.integers(0, 40), min_size=12, max_size=12),
    probes=st.lists(st.sampled_from(["none", "late", "flight"]), min_size=12, max_size=12),
    left_out=st.lists(st.booleans(), min_size=12, max_size=12),
)
def test_the_small_form_gives_the_vector_forms_predictions(  # noqa: PLR0917
    inflight: list[int],
    readings: list[tuple[int, int] | None],
    learned: list[float | None],
    cached: list[float],
    batches: list[tuple[str, int]],
    shared: list[int],
    probes: list[str],
    left_out: list[bool],
) -> None:
    """On random tables, the pool's probes in flight or late included, and with some of
    the pool's ready workers left out by the filters (their batch evidence read over the
    whole pool: `PickContext.pool_slots`)."""
    table, rates = WorkerTable(clock=frozen), Rates()
    n = len(inflight)
    ctx = context(n, prompt_tokens=3000, cached=cached[:n], table=table)
    hashes = tuple(range(1, 41))
    ctx.hashes = hashes
    for i, slot in enumerate(ctx.slots.tolist()):
        table.add_inflight(slot, inflight[i])
        table.add_pending_prefill(slot, 37.0 * i)
        mine = (*hashes[: shared[i]], 10_000 + i)  # shares its first `shared[i]` blocks
        table.start_prefill(slot, i, PendingPrefix(mine, 0, 16.0 * len(mine), 16.0))
        kind, size = batches[i]
        if kind == "floor":
            table.observed_batch(slot, float(size), queued=False)
        elif kind == "ceiling":
            table.observed_batch(slot, float(size), queued=True)
        elif kind == "limit":
            table.set_batch_limit(slot, size)
        if readings[i] is not None:
            waiting, running = readings[i]
            table.set_engine(slot, waiting=waiting, running=running, kv_usage=0.5, scraped_at=0.0)
            table.add_inflight(slot, i % 3)  # picks since the reading
        if learned[i] is not None:
            rates.observe_prefill(slot, MODEL, 500 + 100 * i, 20 + learned[i] * (500 + 100 * i))
            rates.observe_service(slot, MODEL, 1000 * learned[i])
        if probes[i] == "late":
            table.probe_came_late(slot, float(2 + inflight[i] % 5))
        elif probes[i] == "flight":
            table.start_probe(slot, ("probe", i))
    ctx.signals = type(ctx.signals)(table.waiting.copy(), table.kv_usage.copy())
    kept = [i for i in range(n) if not left_out[i]]
    if kept and len(kept) < n:  # the filters left some out
        ctx = ctx.narrowed(kept)
        ctx.hashes = hashes
        assert ctx.pool_slots is not None and len(ctx.pool_slots) == n
    model = scorer(rates)
    small = model._predict_small(ctx)
    small_probes = ctx.probes
    vector = model._predict_vector(ctx)
    for got, want in zip(small, vector, strict=True):
        assert got.tolist() == pytest.approx(want.tolist(), rel=1e-9, abs=1e-9)
    assert small_probes is not None and ctx.probes is not None
    assert small_probes.tolist() == ctx.probes.tolist()
    ctx.footprint = [float(37 * i % 11) for i in range(len(ctx.slots))]
    small_scores = model.score(ctx)
    ttft_module.SMALL_CANDIDATES, kept = 0, ttft_module.SMALL_CANDIDATES  # the vector form
    try:
        vector_scores = model.score(ctx)
    finally:
        ttft_module.SMALL_CANDIDATES = kept
    assert small_scores.tolist() == pytest.approx(vector_scores.tolist(), rel=1e-9, abs=1e-9)


def test_a_request_that_does_not_fit_in_the_cache_waits_for_the_ones_ahead() -> None:
    table = WorkerTable(clock=frozen)
    ctx = context(3, prompt_tokens=100, cached=[100, 0, 0], table=table)
    for slot in ctx.slots.tolist()[:2]:
        table.add_inflight(slot, 1)
    # the cached worker: 2 requests ahead must end first, then 1 runs beside this one;
    # the second: it fits; the third: 1 must end, which waits less than the batch slots
    ctx.memory_ahead, ctx.memory_batch = [2.0, 0.0, 1.0], [2.0, 3.0, 16.0]
    for _ in range(8):
        table.add_inflight(int(ctx.slots[2]), 1)
    model = scorer()
    for form in (model._predict_small, model._predict_vector):
        _, wait, *_ = form(ctx)
        drain = PRIOR.prior_service_ms / PRIOR.prior_batch
        assert wait.tolist() == pytest.approx([PRIOR.prior_service_ms, 0.0, drain])
    assert model.score(ctx).argmax() == 1  # the hit does not buy seconds of waiting


def _seen_running(table: WorkerTable, slot: int, *counts: int) -> None:
    """Fresh readings of `counts` running, nothing waiting (the last stays)."""
    for running in counts:
        table.set_engine(slot, waiting=0, running=running, kv_usage=0.1, scraped_at=0.0)


def test_joining_beyond_the_most_seen_running_costs_an_expected_wait() -> None:
    """Few-slots, 6 req/s (engines of 4 slots, no queue seen yet in the pool): a chat turn
    whose prefix is cached on an engine seen running 3 at most, with 4 on it now, would be
    its 5th; the batch guessed 8 predicted no wait, and it waited ~480 ms. Taken as any of
    3..8, equally likely, the expected wait sends it to a free engine instead. An engine
    seen running as many as the request makes (Dynamo's mockers run 1-3 of 8) keeps it."""
    table = WorkerTable(clock=frozen)
    slots = table.slots(f"10.0.0.{i}:8000" for i in range(2)).tolist()
    _seen_running(table, slots[0], 3)
    _seen_running(table, slots[1], 0)
    table.add_inflight(slots[0], 1)  # picked since the reading: 4 on it
    ctx = context(2, prompt_tokens=1600, cached=[1500, 0], table=table)
    predicted, wait = scorer().predict(ctx)
    assert wait.tolist() == [0.0, 0.0] and predicted[0] < predicted[1]  # no certain wait
    expected = (2 / 3 + 1 / 4) / 6 * PRIOR.prior_service_ms  # batch 3, 4 (of 3..8)
    assert unseen_wait(5.0, 3.0, 8.0, PRIOR.prior_service_ms) == expected
    for candidates in (ttft_module.SMALL_CANDIDATES, 0):  # both forms
        ttft_module.SMALL_CANDIDATES, kept = candidates, ttft_module.SMALL_CANDIDATES
        try:
            assert scorer().score(ctx).argmax() == 1
            assert scorer(unsure_batch_weight=0.0).score(ctx).argmax() == 0
        finally:
            ttft_module.SMALL_CANDIDATES = kept
    _seen_running(table, slots[0], 5, 2)  # seen running 5: a 3rd is no doubt
    ctx = context(2, prompt_tokens=1600, cached=[1500, 0], table=table)
    assert scorer().score(ctx).argmax() == 0


def test_the_most_seen_is_the_pools() -> None:
    """Dynamo's mockers at 3 req/s run 1-3 of 8: a hit joining an engine seen running 1
    as its 2nd sequence, another engine seen running 3, is no doubt (by its own most, the
    batch taken as any of 1..8 cost it a slot's service / 8 twice, and such hits went
    to cold engines: p90 132 ms against Dynamo's 86)."""
    table = WorkerTable(clock=frozen)
    slots = table.slots(f"10.0.0.{i}:8000" for i in range(2)).tolist()
    _seen_running(table, slots[0], 1)
    _seen_running(table, slots[1], 3, 0)
    ctx = context(2, prompt_tokens=1600, cached=[1500, 0], table=table)
    assert table.most_seen_of(slots) == 3.0
    assert unseen_wait(3.0, 1.0, 8.0, 2000.0) == 0.0  # 1 at a time: no evidence of a batch
    assert table.unsure_of(slots[0], math.nan, 3.0) == 3.0
    scores = scorer().score(ctx)
    assert scores[0] == 1.0
    assert scorer().score(ctx).tolist() == scorer(unsure_batch_weight=0.0).score(ctx).tolist()


def test_a_known_batch_leaves_no_doubt() -> None:
    """With the batch known (a ceiling here, or a peer's), only the certain wait counts."""
    table = WorkerTable(clock=frozen)
    slots = table.slots(f"10.0.0.{i}:8000" for i in range(2)).tolist()
    _seen_running(table, slots[0], 3)
    assert table.unsure_of(slots[0], math.nan, 3.0) == 3.0
    assert math.isnan(table.unsure_of(slots[0], 6.0, 3.0))  # the peers' batch: a ceiling
    assert table.unsure_of(slots[0], 2.0, 3.0) == 3.0  # it ran more than the peers' batch
    table.observed_batch(slots[0], 6.0, queued=True)
    assert math.isnan(table.unsure_of(slots[0], math.nan, 3.0))
    assert np.isnan(table.unsure(np.array(slots[:1]), math.nan)).all()


def peers_or_as_it_was(array: np.ndarray | None, slots: list[int], prior: float) -> list[float]:
    """`_small_peers_or` before its all-known test became a sum."""
    if array is None:
        return [prior] * len(slots)
    size = len(array)
    values = [array.item(slot) if slot < size else math.nan for slot in slots]
    known = [value for value in values if not math.isnan(value)]
    if len(known) == len(values):
        return values
    fill = sum(known) / len(known) if known else prior
    return [fill if math.isnan(value) else value for value in values]


odd_floats = st.floats() | st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 1e308])


@given(
    values=st.none() | st.lists(odd_floats, max_size=10),
    slots=st.lists(st.integers(0, 11), min_size=1, max_size=12),
    prior=st.floats(0.0, 1e4),
)
def test_small_peers_or_is_what_it_was(
    values: list[float] | None, slots: list[int], prior: float
) -> None:
    array = None if values is None else np.array(values, dtype=np.float64)
    got = ttft_small._small_peers_or(array, slots, prior)
    assert repr(got) == repr(peers_or_as_it_was(array, slots, prior))


@given(joined=odd_floats, most=odd_floats, batch=odd_floats, service=odd_floats)
def test_unseen_wait_is_nothing_where_the_small_form_skips_it(
    joined: float, most: float, batch: float, service: float
) -> None:
    """The small form calls `unseen_wait` only when `most >= MOST_SEEN_FOR_DOUBT` and not
    `joined <= most`; elsewhere it is the 0.0 it appends."""
    if not (most >= MOST_SEEN_FOR_DOUBT and not joined <= most):
        assert repr(unseen_wait(joined, most, batch, service)) == "0.0"


@pytest.mark.parametrize("huge", [1e7, 2.0**53, 1e20])
def test_unseen_wait_weighs_a_bounded_number_of_batch_sizes(huge: float) -> None:
    """Readings an engine reports are not bounded: a running count past 2**53 stops
    `candidate += 1` from moving, and 1e7 would be 1e7 steps a Pick. At most
    `MAX_DOUBT_STEPS` batch sizes are weighed, each as before."""
    most = MOST_SEEN_FOR_DOUBT
    expected = sum((huge - b) / b for b in (most + k for k in range(MAX_DOUBT_STEPS)))
    size = huge - most + 1.0
    assert unseen_wait(huge, most, huge, 1.0) == pytest.approx(expected / max(size, 1.0))
    assert unseen_wait(huge, huge, huge + 1.0, 1.0) == 0.0  # not past the most seen


def test_unseen_wait_of_infinite_readings_ends() -> None:
    assert math.isnan(unseen_wait(math.inf, MOST_SEEN_FOR_DOUBT, math.inf, 1.0))

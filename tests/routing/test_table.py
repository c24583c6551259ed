"""WorkerTable: stable slots, growth that keeps values, engine metrics, latency estimates."""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.routing import WorkerTable
from kinference.routing.pending import PendingPrefix
from kinference.routing.readings import _fmax
from kinference.routing.table import EWMA_ALPHA, ITL_LAYOUT_1_MS
from tests.clock import FakeClock

A, B, C = "10.0.0.5:8000", "10.0.0.6:8000", "10.0.0.7:8000"


def test_slots_are_allocated_on_first_sight_and_stable() -> None:
    table = WorkerTable()
    assert len(table) == 0
    assert table.slot(A) == 0
    assert table.slot(B) == 1
    assert table.slot(A) == 0
    assert len(table) == 2
    assert table.endpoints == [A, B]
    assert table.slots([B, C, A]).tolist() == [1, 2, 0]
    assert table.slots([]).tolist() == []
    assert table.adapters == [frozenset()] * 3


def test_new_slots_start_unknown_ready_and_idle() -> None:
    table = WorkerTable()
    slot = table.slot(A)
    assert table.inflight[slot] == 0
    assert math.isnan(table.waiting[slot])
    assert math.isnan(table.running[slot])
    assert math.isnan(table.kv_usage[slot])
    assert math.isnan(table.scraped_at[slot])
    assert table.ready[slot]
    assert math.isnan(table.ttft_ms("m")[slot])
    assert math.isnan(table.itl_ms("m")[slot])


def test_growth_past_capacity_keeps_every_value() -> None:
    table = WorkerTable(capacity=2)
    a, b = table.slot(A), table.slot(B)
    table.inflight[a] = 3
    table.set_engine(
        a, waiting=4, running=5, kv_usage=0.25, adapters=frozenset({"x"}), scraped_at=7.0
    )
    table.ready[b] = False
    table.observe_ttft(b, "m", 120)
    table.observe_itl(a, "m", (1,) + (0,) * 14)
    assert len(table.inflight) == 2

    c = table.slot(C)  # the third slot: arrays double
    assert c == 2
    for array in (
        table.inflight,
        table.waiting,
        table.running,
        table.kv_usage,
        table.ready,
        table.scraped_at,
    ):
        assert len(array) == 4
    mask = table.lora_mask("x")
    assert mask is not None
    assert mask.tolist() == [True, False, False, False]
    assert len(table.ttft_ms("m")) == 4
    assert len(table.itl_ms("m")) == 4
    assert table.inflight[a] == 3
    assert (table.waiting[a], table.running[a], table.kv_usage[a]) == (4, 5, 0.25)
    assert table.scraped_at[a] == 7.0
    assert table.adapters[a] == frozenset({"x"})
    assert not table.ready[b]
    assert table.ttft_ms("m")[b] == 120
    assert table.itl_ms("m")[a] == ITL_LAYOUT_1_MS[0]
    # The new slot and the spare capacity are fresh.
    assert table.inflight[c] == 0
    assert table.ready[c]
    assert math.isnan(table.waiting[c])
    assert math.isnan(table.scraped_at[c])
    assert math.isnan(table.ttft_ms("m")[c])
    assert table.adapters[c] == frozenset()


def test_growth_many_times() -> None:
    table = WorkerTable(capacity=1)
    for index in range(100):
        slot = table.slot(f"10.0.{index // 250}.{index % 250}:8000")
        table.inflight[slot] = index
    assert len(table) == 100
    assert table.inflight[:100].tolist() == list(range(100))
    assert len(table.inflight) >= 100


def test_zero_capacity_still_grows() -> None:
    table = WorkerTable(capacity=0)
    slot = table.slot(A)
    table.inflight[slot] += 1
    assert table.inflight[slot] == 1


def test_set_engine_none_is_nan() -> None:
    table = WorkerTable()
    slot = table.slot(A)
    table.set_engine(
        slot,
        waiting=2,
        running=3,
        kv_usage=0.5,
        adapters=frozenset({"lora-1"}),
        scraped_at=10.0,
    )
    assert (table.waiting[slot], table.running[slot], table.kv_usage[slot]) == (2, 3, 0.5)
    assert table.scraped_at[slot] == 10.0
    assert table.adapters[slot] == frozenset({"lora-1"})
    table.set_engine(slot, waiting=None, running=None, kv_usage=None)
    assert math.isnan(table.waiting[slot])
    assert math.isnan(table.running[slot])
    assert math.isnan(table.kv_usage[slot])
    assert math.isnan(table.scraped_at[slot])  # no time given: no reading time
    assert table.adapters[slot] == frozenset()  # adapters default to none
    table.set_engine(slot, waiting=0, running=None, kv_usage=0.0)
    assert table.waiting[slot] == 0  # zero is known, not unknown
    assert table.kv_usage[slot] == 0.0
    assert math.isnan(table.running[slot])


# --- engine readings age out -----------------------------------------------------------------


def test_engine_signals_are_the_fresh_readings() -> None:
    table = WorkerTable()
    a, b = table.slot(A), table.slot(B)
    table.set_engine(a, waiting=3, running=1, kv_usage=0.4, scraped_at=100.0)
    table.set_engine(b, waiting=7, running=2, kv_usage=0.9, scraped_at=99.5)
    waiting, kv = table.engine_signals(100.0, 1.0)
    assert (waiting[a], kv[a]) == (3, 0.4)
    assert (waiting[b], kv[b]) == (7, 0.9)
    assert np.isnan(waiting[len(table) :]).all()  # spare capacity: unknown
    assert np.isnan(kv[len(table) :]).all()
    assert len(waiting) == len(kv) == len(table.inflight)


def test_engine_signals_age_out_after_max_age() -> None:
    table = WorkerTable()
    a, b = table.slot(A), table.slot(B)
    table.set_engine(a, waiting=3, running=1, kv_usage=0.4, scraped_at=100.0)
    table.set_engine(b, waiting=7, running=2, kv_usage=0.9, scraped_at=101.0)
    waiting, kv = table.engine_signals(101.0, 1.0)  # `a` is exactly 1 s old: still fresh
    assert (waiting[a], kv[a]) == (3, 0.4)
    waiting, kv = table.engine_signals(101.001, 1.0)  # `a` is past 1 s: unknown
    assert math.isnan(waiting[a]) and math.isnan(kv[a])
    assert (waiting[b], kv[b]) == (7, 0.9)
    waiting, kv = table.engine_signals(101.001, 5.0)  # the bound is the caller's
    assert (waiting[a], kv[a]) == (3, 0.4)
    # The table keeps the last reading; only what is read through the bound ages.
    assert (table.waiting[a], table.kv_usage[a]) == (3, 0.4)


def test_engine_signals_without_a_reading_time_are_unknown() -> None:
    table = WorkerTable()
    a, b, c = table.slot(A), table.slot(B), table.slot(C)
    table.set_engine(a, waiting=3, running=1, kv_usage=0.4)  # no scraped_at
    waiting, kv = table.engine_signals(0.0, 1e9)
    assert np.isnan(waiting).all() and np.isnan(kv).all()
    table.set_engine(c, waiting=1, running=1, kv_usage=0.2, scraped_at=0.0)
    table.waiting[b], table.kv_usage[b] = 2, 0.5  # written directly, never stamped
    waiting, kv = table.engine_signals(0.0, 1e9)
    assert np.isnan(waiting[[a, b]]).all()
    assert np.isnan(kv[[a, b]]).all()
    assert (waiting[c], kv[c]) == (1, 0.2)
    table.scraped_at[b] = 0.0  # stamped directly
    waiting, kv = table.engine_signals(0.0, 1.0)
    assert (waiting[b], kv[b]) == (2, 0.5)
    table.set_engine(c, waiting=None, running=None, kv_usage=None)  # unknown again
    waiting, kv = table.engine_signals(0.0, 1.0)
    assert math.isnan(waiting[c]) and math.isnan(kv[c])


def test_a_reading_written_into_the_arrays_counts() -> None:
    table = WorkerTable()
    a = table.slot(A)
    table.waiting[a], table.kv_usage[a], table.scraped_at[a] = 2, 0.5, 10.0
    waiting, kv = table.engine_signals(10.0, 1.0)
    assert (waiting[a], kv[a]) == (2, 0.5)


def test_engine_signals_are_copies() -> None:
    table = WorkerTable()
    a = table.slot(A)
    table.set_engine(a, waiting=3, running=1, kv_usage=0.4, scraped_at=5.0)
    waiting, kv = table.engine_signals(5.0, 1.0)
    waiting[a], kv[a] = 99, 0.99
    assert (table.waiting[a], table.kv_usage[a]) == (3, 0.4)


# --- the queue carried forward between readings -----------------------------------------------


def test_the_queue_is_carried_forward_by_picks_and_completions() -> None:
    table = WorkerTable()
    a = table.slot(A)
    # A queue standing a second in the readings: the batch is full.
    table.set_engine(a, waiting=2, running=4, kv_usage=0.5, scraped_at=0.0)
    table.set_engine(a, waiting=2, running=4, kv_usage=0.5, scraped_at=1.0)  # full: batch 4
    assert table.batch[a] == 4
    waiting, _ = table.engine_signals(1.0, 1.0)
    assert table.queue_now(waiting)[a] == 2  # nothing happened since the reading
    table.inflight[a] += 3  # three picks since
    assert table.queue_now(waiting)[a] == 5
    table.inflight[a] -= 7  # seven completions since: the queue drained, slots are free
    assert table.queue_now(waiting)[a] == 0


def test_a_free_engine_queues_once_picks_fill_its_batch() -> None:
    table = WorkerTable()
    a = table.slot(A)
    # A queue standing a second in the readings: the batch is full.
    table.set_engine(a, waiting=1, running=4, kv_usage=0.5, scraped_at=0.0)
    table.set_engine(a, waiting=1, running=4, kv_usage=0.5, scraped_at=1.0)  # learns batch 4
    table.set_engine(a, waiting=0, running=1, kv_usage=0.1, scraped_at=2.0)  # 3 slots free
    assert table.batch[a] == 4  # a smaller running count while none wait: still 4
    waiting, _ = table.engine_signals(2.0, 1.0)
    table.inflight[a] += 3
    assert table.queue_now(waiting)[a] == 0
    table.inflight[a] += 2
    assert table.queue_now(waiting)[a] == 2


def test_the_batch_shrinks_when_requests_wait_with_fewer_running() -> None:
    """KV cache short: the engine runs 2 while others wait; 2 is its batch now."""
    table = WorkerTable()
    a = table.slot(A)
    table.set_engine(a, waiting=0, running=6, kv_usage=0.5, scraped_at=1.0)
    # A queue standing a second in the readings: the batch is full.
    table.set_engine(a, waiting=3, running=2, kv_usage=0.99, scraped_at=2.0)
    table.set_engine(a, waiting=3, running=2, kv_usage=0.99, scraped_at=3.0)
    assert table.batch[a] == 2


def test_an_engine_never_seen_full_has_no_known_batch() -> None:
    table = WorkerTable()
    a = table.slot(A)
    table.set_engine(a, waiting=0, running=0, kv_usage=0.0, scraped_at=1.0)
    table.set_engine(a, waiting=0, running=3, kv_usage=0.2, scraped_at=2.0)
    assert math.isnan(table.batch[a])
    waiting, _ = table.engine_signals(2.0, 1.0)
    table.inflight[a] += 20
    assert table.queue_now(waiting)[a] == 0  # as read: how many it can run is unknown


def test_without_a_running_count_or_a_reading_the_queue_is_as_read() -> None:
    table = WorkerTable()
    a, b, c = table.slot(A), table.slot(B), table.slot(C)
    table.set_engine(a, waiting=3, running=None, kv_usage=0.5, scraped_at=1.0)
    table.waiting[b], table.scraped_at[b] = 2, 1.0  # written directly: no in-flight mark
    table.inflight[[a, b, c]] = 5
    waiting, _ = table.engine_signals(1.0, 1.0)
    queue = table.queue_now(waiting)
    assert (queue[a], queue[b]) == (3, 2)
    assert math.isnan(queue[c])  # never read: unknown
    stale, _ = table.engine_signals(10.0, 1.0)
    assert np.isnan(table.queue_now(stale)[[a, b]]).all()  # stale: unknown, not carried


# --- LoRA adapters --------------------------------------------------------------------------


def test_lora_mask_follows_set_engine() -> None:
    table = WorkerTable()
    a, b, c = table.slot(A), table.slot(B), table.slot(C)
    assert table.lora_mask("sql") is None  # never reported anywhere
    table.set_engine(a, waiting=0, running=0, kv_usage=0, adapters=frozenset({"sql", "chat"}))
    table.set_engine(c, waiting=0, running=0, kv_usage=0, adapters=frozenset({"sql"}))
    sql, chat = table.lora_mask("sql"), table.lora_mask("chat")
    assert sql is not None and chat is not None
    assert sql[[a, b, c]].tolist() == [True, False, True]
    assert chat[[a, b, c]].tolist() == [True, False, False]
    # A later reading without the adapter unloads it; a reading with it loads it again.
    table.set_engine(a, waiting=0, running=0, kv_usage=0, adapters=frozenset({"chat"}))
    sql = table.lora_mask("sql")
    assert sql is not None
    assert sql[[a, b, c]].tolist() == [False, False, True]
    table.set_engine(c, waiting=None, running=None, kv_usage=None)  # no adapters known
    sql = table.lora_mask("sql")
    assert sql is not None
    assert not sql[: len(table)].any()
    assert table.adapters == [frozenset({"chat"}), frozenset(), frozenset()]


def test_lora_masks_grow_with_the_table() -> None:
    table = WorkerTable(capacity=1)
    a = table.slot(A)
    table.set_engine(a, waiting=0, running=0, kv_usage=0, adapters=frozenset({"sql"}))
    b = table.slot(B)  # grows
    table.set_engine(b, waiting=0, running=0, kv_usage=0, adapters=frozenset({"sql"}))
    mask = table.lora_mask("sql")
    assert mask is not None
    assert len(mask) == len(table.inflight)
    assert mask[[a, b]].tolist() == [True, True]
    assert not mask[len(table) :].any()


def test_ttft_ewma_per_model_and_slot() -> None:
    table = WorkerTable()
    a, b = table.slot(A), table.slot(B)
    table.observe_ttft(a, "m", 100)
    assert table.ttft_ms("m")[a] == 100  # the first observation is the estimate
    table.observe_ttft(a, "m", 200)
    assert table.ttft_ms("m")[a] == pytest.approx((1 - EWMA_ALPHA) * 100 + EWMA_ALPHA * 200)
    assert EWMA_ALPHA == 0.2
    assert table.ttft_ms("m")[a] == pytest.approx(120)
    assert math.isnan(table.ttft_ms("m")[b])
    assert math.isnan(table.ttft_ms("other")[a])  # per model
    table.observe_ttft(a, "other", 5)
    assert table.ttft_ms("other")[a] == 5
    assert table.ttft_ms("m")[a] == pytest.approx(120)


def test_itl_layout_1_midpoints() -> None:
    # The spec's upper-inclusive edges; each bucket is represented by its midpoint.
    edges = [0, 5, 10, 15, 20, 30, 40, 50, 75, 100, 150, 200, 300, 500, 1000]
    midpoints = [(low + high) / 2 for low, high in pairwise(edges)]
    assert ITL_LAYOUT_1_MS.tolist() == [*midpoints, 1500]


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ((4,) + (0,) * 14, 2.5),
        ((0,) * 14 + (1,), 1500.0),
        ((1, 1) + (0,) * 13, 5.0),  # (2.5 + 7.5) / 2
        ((0,) * 9 + (3,) + (0,) * 4 + (1,), (3 * 125 + 1500) / 4),
    ],
)
def test_itl_from_bucket_counts(counts: tuple[int, ...], expected: float) -> None:
    table = WorkerTable()
    slot = table.slot(A)
    table.observe_itl(slot, "m", counts)
    assert table.itl_ms("m")[slot] == pytest.approx(expected)


def test_itl_ewma_and_empty_counts() -> None:
    table = WorkerTable()
    slot = table.slot(A)
    table.observe_itl(slot, "m", (0,) * 15)  # no gaps: nothing learned
    assert math.isnan(table.itl_ms("m")[slot])
    table.observe_itl(slot, "m", (1,) + (0,) * 14)
    table.observe_itl(slot, "m", (0,) * 9 + (1,) + (0,) * 5)
    assert table.itl_ms("m")[slot] == pytest.approx(0.8 * 2.5 + 0.2 * 125)
    table.observe_itl(slot, "m", ())
    assert table.itl_ms("m")[slot] == pytest.approx(0.8 * 2.5 + 0.2 * 125)


def test_estimates_are_views_of_the_table() -> None:
    table = WorkerTable()
    slot = table.slot(A)
    estimates = table.ttft_ms("m")
    table.observe_ttft(slot, "m", 42)
    assert estimates[slot] == 42
    assert np.isnan(estimates[slot + 1 :]).all()


def test_an_engine_seen_running_without_a_queue_is_given_headroom() -> None:
    """Seen running 20 with nothing waiting (never full): at least twice that, not the
    prior's 8, so the 21st sequence is no queue."""
    table = WorkerTable()
    a = table.slot("a:1")
    table.set_engine(a, waiting=0, running=20, kv_usage=0.3, scraped_at=1.0)
    waiting = table.waiting.copy()
    slots = np.array([a])
    _sequences, batch = table.occupancy(slots, waiting, 8.0)
    assert batch[0] == 2 * 20
    assert table.occupancy_of(a, waiting.item(a), 8.0) == (20.0, 40.0)


def test_without_readings_the_batch_is_learned_from_queueing_observed() -> None:
    table = WorkerTable()
    a = table.slot("a:1")
    slots = np.array([a])
    nan = np.full(len(table.inflight), np.nan)
    assert table.occupancy(slots, nan, 8.0)[1][0] == 8.0  # the prior
    table.observed_batch(a, 12.0, queued=False)  # no queue at 12: at least 12, try 24
    assert table.occupancy(slots, nan, 8.0)[1][0] == 24.0
    table.observed_batch(a, 17.0, queued=True)  # queued at 17: at most 16
    assert table.occupancy(slots, nan, 8.0)[1][0] == 16.0
    table.observed_batch(a, 10.0, queued=True)  # under the floor: not believed
    assert table.batch_ceiling[a] == 16.0
    table.observed_batch(a, 18.0, queued=False)  # no queue past the ceiling: it goes
    assert np.isnan(table.batch_ceiling[a])
    assert table.occupancy(slots, nan, 8.0)[1][0] == 36.0
    table.forget_batch(a)
    assert table.occupancy(slots, nan, 8.0)[1][0] == 8.0


def test_a_configured_batch_overrides_the_guess_but_not_a_full_reading() -> None:
    table = WorkerTable()
    a, b = table.slot("a:1"), table.slot("b:1")
    table.set_batch_limit(a, 64)
    table.set_batch_limit(b, 64)
    # A queue standing a second in the readings: the batch is full.
    table.set_engine(b, waiting=3, running=10, kv_usage=0.99, scraped_at=0.0)  # KV short
    table.set_engine(b, waiting=3, running=10, kv_usage=0.99, scraped_at=1.0)
    waiting = table.waiting.copy()
    _, batch = table.occupancy(np.array([a, b]), waiting, 8.0)
    assert batch.tolist() == [64.0, 10.0]
    assert table.occupancy_of(a, waiting.item(a), 8.0)[1] == 64.0
    assert table.occupancy_of(b, waiting.item(b), 8.0)[1] == 10.0
    table.set_batch_limit(a, None)
    assert table.occupancy_of(a, waiting.item(a), 8.0)[1] == 8.0


def test_one_reading_with_a_request_waiting_is_no_full_batch() -> None:
    """A scheduler admits at its next step: a reading may catch one request waiting on an
    engine running 1 of 8 (Dynamo's mockers did); that is no batch of 1."""
    table = WorkerTable()
    a = table.slot(A)
    table.set_engine(a, waiting=1, running=1, kv_usage=0.1, scraped_at=1.0)
    assert math.isnan(table.batch[a])
    table.set_engine(a, waiting=0, running=3, kv_usage=0.2, scraped_at=2.0)
    table.set_engine(a, waiting=1, running=3, kv_usage=0.2, scraped_at=3.0)
    assert math.isnan(table.batch[a])  # waiting, then not: still nothing lasting
    table.set_engine(a, waiting=2, running=8, kv_usage=0.9, scraped_at=4.0)
    assert table.batch[a] == 8  # a queue standing a second in the readings: full at 8


def test_a_queue_seen_briefly_is_no_full_batch() -> None:
    """Requests waiting in two readings 0.2 s apart (a long prompt's prefill, or the
    engine's process stalled on a busy host) with 2 of 8 running: no batch of 2."""
    table = WorkerTable()
    a = table.slot(A)
    table.set_engine(a, waiting=1, running=2, kv_usage=0.3, scraped_at=1.0)
    table.set_engine(a, waiting=1, running=2, kv_usage=0.3, scraped_at=1.2)
    table.set_engine(a, waiting=1, running=2, kv_usage=0.3, scraped_at=1.4)
    assert math.isnan(table.batch[a])
    table.set_engine(a, waiting=0, running=2, kv_usage=0.3, scraped_at=1.6)  # drained
    table.set_engine(a, waiting=1, running=2, kv_usage=0.3, scraped_at=1.8)
    table.set_engine(a, waiting=1, running=2, kv_usage=0.3, scraped_at=2.6)
    assert math.isnan(table.batch[a])  # the streak began again at 1.8
    table.set_engine(a, waiting=1, running=2, kv_usage=0.3, scraped_at=2.9)
    assert table.batch[a] == 2  # standing a second: the engine holds 2 now


@settings(deadline=None, max_examples=300)
@given(st.floats(), st.floats())
def test_fmax_is_the_larger_nan_only_when_both_are(a: float, b: float) -> None:
    """`_fmax` by comparisons is the NaN-skipping `max` it replaced, to the zero's sign."""
    expected = b if math.isnan(a) else a if math.isnan(b) else max(a, b)
    assert repr(_fmax(a, b)) == repr(expected)


def test_a_worker_whose_prefills_all_ended_has_none_pending_and_a_new_stretch_next() -> None:
    """Before: fractional token estimates ended in another order than they started left a
    rounding residue (1e-13 tokens) pending for good, so the stretch of prefill never ended:
    a new prefill there was taken as started when the first ever did, and as computed at
    once (`prefill_done`), the wait for it gone from every later prediction."""
    clock = FakeClock(100.0)
    table = WorkerTable(clock=clock)
    slot = table.slot(A)
    tokens = [269.16, 1694.94, 1527.67, 510.51, 991.12]  # 5.7e-13 left, in this order
    for key, count in enumerate(tokens):
        table.start_prefill(slot, key, PendingPrefix((), 0, count, 16.0))
    for key in (0, 1, 2, 4, 3):
        table.end_prefill(slot, key)
    assert table.pending_prefill[slot] == 0.0
    assert math.isnan(table.prefill_since[slot])
    clock.advance(60.0)
    table.start_prefill(slot, "later", PendingPrefix((), 0, 500.0, 16.0))
    assert table.prefill_since[slot] == clock.now
    assert table.prefill_done(slot, 1.0) == 0.0  # nothing of it computed yet

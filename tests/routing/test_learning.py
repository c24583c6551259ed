"""Feedback into routing state: pending prefill, learned rates from reports, the
eviction-aware prefix index, the cached-tokens seam and the prediction-quality windows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kinference.routing.decision import LocalChoice
from kinference.routing.journal import NullJournal
from kinference.routing.learning import REMOTE_PREFILL_TTL_S, Learning, Served
from kinference.routing.pending import PendingPrefix
from kinference.routing.plugins.cached import (
    APPROXIMATE,
    ApproximateCachedTokens,
    CachedTokenSources,
    PrefixQuery,
)
from kinference.routing.prefix import PrefixIndex
from kinference.routing.quality import ErrorWindow
from kinference.routing.rates import PRIOR_SAMPLES
from kinference.routing.table import IndexArray, WorkerTable
from tests.routing.plugin_helpers import MODEL, request

HASHES = tuple(range(100, 140))  # 40 blocks


def choice(slot: int, **fields: object) -> LocalChoice:
    return LocalChoice(f"10.0.0.{slot}:8000", slot, "default/pool", MODEL, **fields)  # type: ignore[arg-type]


def learning() -> Learning:
    return Learning(WorkerTable(), PrefixIndex(10_000), NullJournal())


def served(**fields: object) -> Served:
    values: dict[str, object] = {"prompt_tokens": 640, "cached_tokens": None,
              "itl_bucket_counts": (), "ttft_ms": None, "service_ms": None}  # fmt: skip
    values.update(fields)
    return Served(**values)  # type: ignore[arg-type]


def first_service(learn: Learning, sample_ms: float) -> float:
    """A worker's service time after its first sample: the prior weighs PRIOR_SAMPLES."""
    a, prior = learn.rates.alpha, learn.rates.prior_service_ms
    kept = (1.0 - a) * PRIOR_SAMPLES * a
    return (kept * prior + a * sample_ms) / (kept + a)


def test_pending_prefill_lasts_from_pick_to_first_token() -> None:
    learn = learning()
    picked = choice(0, prompt_tokens=1000.0, cached_tokens=400.0)
    learn.picked(picked)
    assert learn.table.pending_prefill[0] == 600
    learn.first_token(picked, 80.0)
    assert learn.table.pending_prefill[0] == 0
    assert learn.table.ttft_ms(MODEL)[0] == 80.0
    assert learn.quality.ttft_ms.summary().count == 0  # no prediction was made


def test_a_final_report_teaches_prefill_and_service_rates() -> None:
    learn = learning()
    picked = choice(1, prompt_tokens=1000.0, predicted_ttft_ms=90.0, predicted_wait_ms=0.0)
    learn.picked(picked)
    learn.first_token(picked, 120.0)
    learn.final(picked, served(prompt_tokens=1000, cached_tokens=200, ttft_ms=120.0,
                                service_ms=1500.0))  # fmt: skip
    assert learn.rates.learned(MODEL, "service_ms", 1) == pytest.approx(
        first_service(learn, 1500.0)
    )
    base = learn.rates.learned(MODEL, "prefill_base_ms", 1)
    per_token = learn.rates.learned(MODEL, "prefill_ms_per_token", 1)
    assert base == pytest.approx(learn.rates.prior_base_ms)  # one length: the prior's
    assert base + 800 * per_token == pytest.approx(120.0)  # 800 uncached tokens reported
    assert learn.quality.ttft_ms.summary().mean_abs_error == 30.0


def test_a_first_token_beside_running_sequences_teaches_the_busy_cost() -> None:
    """What the TTFT took beyond the learned prefill, over the sequences it joined, is the
    model's busy cost; the prefill sample is net of it."""
    learn = learning()
    for tokens in (200, 1800, 600, 1400, 1000) * 4:  # alone: 20 ms + 0.05 ms a token
        alone = choice(1, prompt_tokens=float(tokens), sequences=1.0)
        learn.final(alone, served(prompt_tokens=tokens, cached_tokens=0,
                                  ttft_ms=20.0 + 0.05 * tokens))  # fmt: skip
    assert learn.rates.busy_ms(MODEL) == 0.0  # none ran beside them: the prior
    for tokens in (200, 1800, 600, 1400, 1000) * 6:  # beside 4 running: 40 ms later
        busy = choice(1, prompt_tokens=1000.0, sequences=5.0)
        learn.final(busy, served(prompt_tokens=1000, cached_tokens=0, ttft_ms=110.0))
        alone = choice(1, prompt_tokens=float(tokens), sequences=1.0)
        learn.final(alone, served(prompt_tokens=tokens, cached_tokens=0,
                                  ttft_ms=20.0 + 0.05 * tokens))  # fmt: skip
    assert learn.rates.busy_ms(MODEL) == pytest.approx(10.0, rel=0.05)
    assert learn.rates.prefill_ms(1, MODEL, 1000.0) == pytest.approx(70.0, rel=0.05)


def test_a_request_that_queued_is_no_prefill_sample() -> None:
    learn = learning()
    picked = choice(1, prompt_tokens=1000.0, predicted_wait_ms=900.0)
    learn.final(picked, served(ttft_ms=1000.0, service_ms=10.0))
    assert math.isnan(learn.rates.learned(MODEL, "prefill_base_ms", 1))
    assert learn.rates.learned(MODEL, "service_ms", 1) == pytest.approx(first_service(learn, 10.0))


def test_a_reported_shortfall_shrinks_the_capacity_and_keeps_the_blocks() -> None:
    """The engine had evicted the prefix; the request prefilled it again before its final
    report, so the blocks stay (h101): what the report teaches is the capacity."""
    learn = learning()
    index = learn.prefix
    index.record(0, HASHES)
    for other in range(5):  # 5 x 40 blocks recorded after it
        index.record(0, tuple(range(1000 * (other + 1), 1000 * (other + 1) + 40)))
    held, age = index.held(0, HASHES)
    assert (held, age) == (40, 239)
    picked = choice(0, prompt_tokens=640.0, cached_tokens=640.0, hashes=HASHES,
                    held_blocks=held, held_age=age)  # fmt: skip
    learn.picked(picked)
    learn.final(picked, served(prompt_tokens=640, cached_tokens=0))
    assert index.match(HASHES) == {0: 40}  # prefilled again: held, the most recent
    # It kept fewer blocks than the index assumed: at once the age of the first block it
    # lost, 239 - 39 (h103; a tenth of 10 000 a report before, 9 000 here).
    assert index.capacity[0] == 200
    assert index.match(HASHES) == {0: 40}
    assert index.match(tuple(range(1000, 1040))) == {}  # 200 kept: the oldest 40 left
    assert index.match(tuple(range(2000, 2040))) == {0: 40}
    summary = learn.quality.cached_tokens.summary()
    assert (summary.count, summary.mean_abs_error, summary.bias) == (1, 640.0, 640.0)


def test_a_short_report_while_the_worker_was_prefilling_teaches_no_eviction() -> None:
    """Blocks another request was still computing at the pick are not cached yet: a report
    of 0 then is no eviction (the engine reports what it had when the request started)."""
    learn = learning()
    learn.prefix.record(0, HASHES)
    held, age = learn.prefix.held(0, HASHES)
    picked = choice(0, prompt_tokens=640.0, cached_tokens=640.0, hashes=HASHES,
                    held_blocks=held, held_age=age, settled=False)  # fmt: skip
    learn.final(picked, served(prompt_tokens=640, cached_tokens=0))
    assert learn.prefix.match(HASHES) == {0: 40}
    assert 0 not in learn.prefix.capacity


def test_a_partial_shortfall_keeps_every_block() -> None:
    learn = learning()
    learn.prefix.record(0, HASHES)
    held, age = learn.prefix.held(0, HASHES)
    picked = choice(0, prompt_tokens=640.0, cached_tokens=640.0, hashes=HASHES,
                    held_blocks=held, held_age=age)  # fmt: skip
    learn.final(picked, served(prompt_tokens=640, cached_tokens=160))  # 10 of 40 blocks
    assert learn.prefix.match(HASHES) == {0: 40}  # the other 30 prefilled again
    assert learn.prefix.capacity[0] == 40  # the age (0), floored at the prompt's blocks


def test_capacity_bounds_what_the_index_keeps_and_a_deeper_hit_raises_it() -> None:
    index = PrefixIndex(10_000)
    index.record(0, HASHES)
    for _ in range(60):
        index.record(0, HASHES)
        index.shortfall(0, HASHES, 0, age=50)
    assert index.capacity[0] == 50
    index.record(0, tuple(range(5000, 5100)))  # 100 blocks: only 50 kept
    assert index.match(tuple(range(5000, 5100))) == {0: 50}
    index.confirmed(0, age=80)
    assert index.capacity[0] == 80
    index.forget(0)
    assert 0 not in index.capacity


def test_the_approximate_source_answers_cached_tokens_per_candidate() -> None:
    index = PrefixIndex(1000)
    index.record(2, HASHES[:30])
    index.record(0, HASHES[:10])
    source = ApproximateCachedTokens(index)
    query = PrefixQuery(request(), MODEL, "default/pool", HASHES, 64, prompt_tokens=800.0)
    slots: IndexArray = np.array([0, 1, 2], dtype=np.intp)
    assert source.cached_tokens(query, slots).tolist() == [200.0, 0.0, 600.0]
    long = PrefixQuery(request(), MODEL, "p", HASHES, 64, prompt_tokens=9000.0, truncated=True)
    assert source.cached_tokens(long, slots).tolist() == [160.0, 0.0, 480.0]  # 16 a block


def test_a_precise_source_plugs_in_by_prefix_mode() -> None:
    class Precise:
        def cached_tokens(self, query: PrefixQuery, slots: IndexArray) -> np.ndarray:  # type: ignore[type-arg]
            return np.full(len(slots), 7.0)

    approximate = ApproximateCachedTokens(PrefixIndex(10))
    sources = CachedTokenSources(approximate)
    precise = Precise()
    sources.register("precise", precise)
    assert sources.get("precise") is precise
    assert sources.get(APPROXIMATE) is approximate
    assert sources.get("unknown-mode") is approximate


def test_the_error_window_reports_mae_bias_and_correlation() -> None:
    window = ErrorWindow(size=4)
    for predicted, observed in ((1, 2), (2, 4), (3, 6), (4, 8), (5, 10)):
        window.add(predicted, observed)
    summary = window.summary()
    assert summary.count == 4  # the oldest pair fell out
    assert summary.mean_abs_error == pytest.approx(3.5)
    assert summary.bias == pytest.approx(-3.5)
    assert summary.correlation == pytest.approx(1.0)
    assert math.isnan(ErrorWindow().summary().correlation)


def report(learn: Learning, picked: LocalChoice, ttft_ms: float, cached: int = 0) -> None:
    """First token after `ttft_ms`, then the final report (`cached` tokens reported)."""
    learn.picked(picked)
    learn.first_token(picked, ttft_ms)
    tokens = int(picked.prompt_tokens)
    learn.final(picked, served(prompt_tokens=tokens, cached_tokens=cached, ttft_ms=ttft_ms))


def test_without_readings_a_first_token_without_queue_raises_the_batch_floor() -> None:
    learn = learning()
    picked = choice(2, prompt_tokens=500.0, predicted_ttft_ms=60.0, sequences=11.0)
    report(learn, picked, 70.0)  # about as predicted: no queue at 11 sequences
    assert learn.table.batch_floor[2] == 11.0
    late = choice(2, prompt_tokens=500.0, predicted_ttft_ms=60.0, sequences=15.0)
    report(learn, late, 900.0)  # waited for a slot at 15
    assert learn.table.batch_ceiling[2] == 14.0


def test_with_engine_readings_a_late_first_token_caps_the_batch_below_it() -> None:
    """Readings show a full batch only after a standing queue; on engines of few slots a
    queue drains sooner, and the late first tokens are what says the batch is smaller."""
    learn = learning()
    learn.table.slots(f"10.0.0.{i}:8000" for i in range(3))
    learn.table.set_engine(2, waiting=0, running=4, kv_usage=0.1, scraped_at=1.0)
    waiting = np.array([np.nan, np.nan, 0.0])
    assert learn.table.occupancy_of(2, 0.0, 8.0) == (4.0, 8.0)  # twice what it ran
    on_time = choice(2, prompt_tokens=500.0, predicted_ttft_ms=60.0, sequences=5.0)
    report(learn, on_time, 900.0, cached=0)
    assert learn.table.batch_ceiling[2] == 4.0
    assert learn.table.occupancy_of(2, 0.0, 8.0) == (4.0, 4.0)  # a 5th would queue
    assert learn.table.occupancy(np.array([2]), waiting, 8.0)[1].tolist() == [4.0]
    learn.table.set_engine(2, waiting=0, running=6, kv_usage=0.1, scraped_at=2.0)
    assert learn.table.occupancy_of(2, 0.0, 8.0) == (6.0, 12.0)  # it ran more: no cap
    assert np.isnan(learn.table.batch_floor[2])  # the readings give the floor


def test_with_readings_an_on_time_first_token_raises_the_floor_if_none_ended_meanwhile() -> None:
    """A reading may miss what a request joined (one ended before the next scrape): its
    on-time first token shows the batch took them all, unless a slot freed in between."""
    learn = learning()
    learn.table.slots(f"10.0.0.{i}:8000" for i in range(3))
    learn.table.set_engine(2, waiting=0, running=4, kv_usage=0.1, scraped_at=1.0)
    learn.table.add_inflight(2, 4.0)
    fifth = choice(2, prompt_tokens=500.0, predicted_ttft_ms=60.0, sequences=5.0,
                   ended_before=learn.table.ended.item(2))  # fmt: skip
    learn.picked(fifth)
    learn.first_token(fifth, 65.0)
    assert learn.table.batch_floor[2] == 5.0  # ran 5 at once
    learn.table.add_inflight(2, 1.0)
    sixth = choice(2, prompt_tokens=500.0, predicted_ttft_ms=60.0, sequences=6.0,
                   ended_before=learn.table.ended.item(2))  # fmt: skip
    learn.picked(sixth)
    learn.table.add_inflight(2, -1.0)  # one ended before its first token: its slot, perhaps
    learn.first_token(sixth, 65.0)
    assert learn.table.batch_floor[2] == 5.0
    unread = choice(2, prompt_tokens=500.0, predicted_ttft_ms=60.0, sequences=7.0)
    learn.picked(unread)
    learn.first_token(unread, 65.0)  # without the count at its pick: proves nothing
    assert learn.table.batch_floor[2] == 5.0


def test_a_first_token_late_for_a_cache_miss_is_no_queue() -> None:
    """Predicted cached, reported not: its own prefill made it late, not a batch slot."""
    learn = learning()
    picked = choice(2, prompt_tokens=12_000.0, cached_tokens=11_900.0,
                    predicted_ttft_ms=30.0, sequences=3.0)  # fmt: skip
    report(learn, picked, 600.0, cached=0)
    assert np.isnan(learn.table.batch_ceiling[2])


def test_a_request_found_queued_is_no_prefill_sample() -> None:
    learn = learning()
    learn.table.slots(f"10.0.0.{i}:8000" for i in range(2))
    learn.table.set_engine(1, waiting=0, running=4, kv_usage=0.1, scraped_at=1.0)
    picked = choice(1, prompt_tokens=500.0, predicted_ttft_ms=40.0, sequences=5.0)
    report(learn, picked, 1000.0)  # a second behind the batch, not a slow prefill
    assert math.isnan(learn.rates.learned(MODEL, "prefill_base_ms", 1))


def test_a_prefill_sharing_another_in_progress_is_settled_by_its_end() -> None:
    """Pending entries leave with the first token, or with the release if none came."""
    learn = learning()
    first = choice(0, prompt_tokens=640.0, hashes=HASHES)
    learn.picked(first)
    assert learn.table.shared_pending(0, HASHES) == 640.0
    learn.released_before_first_token(first)
    assert learn.table.shared_pending(0, HASHES) == 0.0
    assert learn.table.pending_prefill[0] == 0.0


def test_other_replicas_prefills_end_with_their_report_their_replica_or_a_ttl() -> None:
    learn = learning()
    learn.table.slots(f"10.0.0.{i}:8000" for i in range(2))
    doc = PendingPrefix(HASHES, 0, 640.0, 16.0)
    learn.remote_prefilling("r1", 0, 7, doc, now=0.0)
    learn.remote_prefilling("r2", 1, 7, doc, now=1.0)  # the same pick id, another replica
    assert learn.table.shared_pending(0, HASHES) == 640.0
    learn.remote_prefilled("r1", 0, 7)
    assert learn.table.pending_prefill[0] == 0.0
    assert learn.table.pending_prefill[1] == 640.0
    learn.remote_prefilling("r2", 0, 8, doc, now=2.0)
    learn.remote_gone("r2")  # the replica left: its prefills with it
    assert learn.table.pending_prefill.tolist()[:2] == [0.0, 0.0]
    learn.remote_prefilling("r3", 1, 9, doc, now=3.0)
    learn.remote_prefilling("r3", 0, 10, doc, now=3.0 + REMOTE_PREFILL_TTL_S + 1)
    assert learn.table.pending_prefill[1] == 0.0  # its end never came: expired
    assert learn.table.pending_prefill[0] == 640.0


def test_a_slow_first_token_alone_on_its_worker_is_no_queue() -> None:
    learn = learning()
    alone = choice(2, prompt_tokens=500.0, predicted_ttft_ms=60.0, sequences=1.0)
    learn.picked(alone)
    learn.first_token(alone, 900.0)  # slower than the prior, but behind nothing
    assert np.isnan(learn.table.batch_ceiling[2])


def test_a_report_of_a_uint32s_top_prompt_tokens_teaches_no_prefill() -> None:
    """A report claiming 2**32 - 1 prompt tokens for a prompt the Pick estimated at 1000:
    the prefill fit weighs a sample by its tokens squared, and that one sample flattened
    the learned per-token cost (a 12k-token prompt predicted at 32 ms instead of 611, for
    hundreds of reports). It teaches no prefill; its service time still counts."""
    learn = learning()
    for n in range(6):  # learned: 10 ms + 0.05 ms a token
        tokens = (500, 4000)[n % 2]
        picked = choice(0, prompt_tokens=float(tokens), predicted_ttft_ms=60.0)
        learn.picked(picked)
        learn.first_token(picked, 10.0 + 0.05 * tokens)
        learn.final(picked, served(prompt_tokens=tokens, ttft_ms=10.0 + 0.05 * tokens))
    before = learn.rates.prefill_ms(0, MODEL, 12_000.0)
    assert before > 400.0
    picked = choice(0, prompt_tokens=1000.0, predicted_ttft_ms=60.0)
    learn.picked(picked)
    learn.first_token(picked, 60.0)
    bogus = served(prompt_tokens=2**32 - 1, cached_tokens=0, ttft_ms=60.0, service_ms=900.0)
    learn.final(picked, bogus)
    assert learn.rates.prefill_ms(0, MODEL, 12_000.0) == pytest.approx(before)
    assert not math.isnan(learn.rates.learned(MODEL, "service_ms", 0))
    picked = choice(0, prompt_tokens=1000.0, predicted_ttft_ms=60.0)  # plausible: taught
    learn.picked(picked)
    learn.first_token(picked, 60.0)
    learn.final(picked, served(prompt_tokens=1000, ttft_ms=60.0))
    assert learn.rates.prefill_ms(0, MODEL, 12_000.0) != pytest.approx(before)

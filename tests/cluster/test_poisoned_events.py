"""Another replica's events carrying values no engine or report produces (a bug there, a
foreign writer sharing the prefix): numbers JSON spells `Infinity` or `1e999`, negative
times and counts, readings past what a scrape accepts. None stops the reader, and none is
learned: the rates and estimates the next good samples teach are what they would have been."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from kinference.cluster import codec
from kinference.cluster.view import ClusterView
from kinference.config.pools import MAX_ENGINE_REQUESTS
from kinference.routing import PrefixIndex, WorkerTable
from tests.cluster.wiring import view_of

ENDPOINT = "10.0.0.1:8000"
INF = float("inf")


def fresh_view() -> ClusterView:
    return view_of(WorkerTable(), PrefixIndex(1000))


def entry(seq: int, events: list[list[Any]]) -> codec.Entry:
    """The entry as a reader decodes it from the stream (JSON, `Infinity` and all)."""
    fields = codec.encode("other", seq, events, None)
    decoded = codec.decode(b"1-0", {k.encode(): str(v).encode() for k, v in fields.items()})
    assert decoded is not None
    return decoded


GOOD = [
    [codec.FIRST_TOKEN, ENDPOINT, "m", 120.0],
    [codec.ITL, ENDPOINT, "m", [0, 0, 4, *[0] * 12]],
    [codec.SERVED, ENDPOINT, "m", 1000.0, 60.0, 900.0],
]


def learned(view: ClusterView) -> tuple[float, ...]:
    table, rates = view.table, view.router.learning.rates
    slot = table.slot(ENDPOINT)
    return (
        table.ttft_ms("m")[slot],
        table.itl_ms("m")[slot],
        rates.learned("m", "service_ms", slot),
        rates.learned("m", "prefill_base_ms", slot),
        rates.learned("m", "prefill_ms_per_token", slot),
    )


@pytest.mark.parametrize(
    "poison",
    [
        [codec.ITL, ENDPOINT, "m", [1e999] * 15],  # int(inf): OverflowError
        [codec.SHORTFALL, ENDPOINT, codec.pack_hashes([1, 2]), 1e999, None],
        [codec.PREFILLING, ENDPOINT, 7, 1e999, 10.0, 4.0],
        [codec.CONFIRMED, ENDPOINT, 1e999],
    ],
    ids=["itl", "shortfall", "prefilling", "confirmed"],
)
def test_an_infinite_count_skips_its_event_not_the_rest_of_the_entry(poison: list[Any]) -> None:
    view, clean = fresh_view(), fresh_view()
    view.apply(entry(1, [poison, *GOOD]))
    clean.apply(entry(1, GOOD))
    assert learned(view) == learned(clean)


@pytest.mark.parametrize(
    "poison",
    [
        [codec.FIRST_TOKEN, ENDPOINT, "m", INF],
        [codec.FIRST_TOKEN, ENDPOINT, "m", -5000.0],
        [codec.FIRST_TOKEN, ENDPOINT, "m", float("nan")],
        [codec.ITL, ENDPOINT, "m", [-1, 3, *[0] * 13]],
        [codec.SERVED, ENDPOINT, "m", 1000.0, INF, INF],
        [codec.SERVED, ENDPOINT, "m", INF, 60.0, None],
        [codec.SERVED, ENDPOINT, "m", -1e12, 60.0, -7.0],
        [codec.SERVED, ENDPOINT, "m", 1000.0, -60.0, None],
    ],
    ids=[
        "ttft-inf", "ttft-negative", "ttft-nan", "itl-negative", "served-inf",
        "tokens-inf", "negative", "prefill-negative",
    ],
)  # fmt: skip
def test_a_sample_no_report_could_make_teaches_nothing(poison: list[Any]) -> None:
    """Before: an infinite service time or prefill stayed in the worker's mean and fit for
    ever (each later sample folds into infinity), on every replica reading the stream."""
    view, clean = fresh_view(), fresh_view()
    view.apply(entry(1, [poison, *GOOD]))
    clean.apply(entry(1, GOOD))
    assert learned(view) == learned(clean)
    view.apply(entry(2, GOOD))
    clean.apply(entry(2, GOOD))
    assert learned(view) == learned(clean)
    assert all(math.isfinite(value) for value in learned(view))


def reading(**values: Any) -> dict[str, Any]:
    return {"at": time.time(), "ready": True, "read": True, **values}


def test_a_remote_reading_is_bounded_as_a_scrape_bounds_it() -> None:
    """A scrape clamps an engine's counts to [0, MAX_ENGINE_REQUESTS] and its KV-cache use
    to [0, 1], and drops non-finite samples; the scrape leader's readings as another
    replica reads them off the stream must not be what a scrape would refuse."""
    view = fresh_view()
    slot = view.table.slot(ENDPOINT)
    view.engine_reading(ENDPOINT, reading(waiting=-40, running=1e12, kv_usage=7.5))
    table = view.table
    assert (table.waiting[slot], table.running[slot], table.kv_usage[slot]) == (
        0.0, MAX_ENGINE_REQUESTS, 1.0,
    )  # fmt: skip
    view.engine_reading(ENDPOINT, reading(waiting=1e999, running=3, kv_usage=-1))
    assert math.isnan(table.waiting[slot])  # no finite number: unknown, as in a scrape
    assert (table.running[slot], table.kv_usage[slot]) == (3.0, 0.0)


def test_samples_of_models_or_workers_the_policy_does_not_serve_keep_nothing() -> None:
    """Before: each model named on the stream or in the statistics got per-slot arrays of
    its own (TTFT, ITL, each learned rate) and each endpoint a slot, whoever wrote them: a
    writer naming thousands grew every replica's tables without bound."""
    view = fresh_view()
    table, rates = view.table, view.router.learning.rates
    slots, models = len(table), len(rates._arrays)
    junk = [
        event
        for n in range(500)
        for event in (
            [codec.FIRST_TOKEN, ENDPOINT, f"model-{n}", 120.0],
            [codec.SERVED, f"10.9.{n // 256}.{n % 256}:8000", "m", 1000.0, 60.0, 900.0],
            [codec.ITL, ENDPOINT, f"model-{n}", [0, 0, 4, *[0] * 12]],
            [codec.BUSY, ENDPOINT, f"model-{n}", 2.0, 30.0],
            [codec.TEXT_SIZE, ENDPOINT, f"model-{n}", 3200.0, 2000.0],
        )
    ]
    view.apply(entry(1, junk))
    assert (len(table), len(rates._arrays)) == (slots, models)
    assert rates.peek("model-7", "service_ms") is None
    assert view.router.learning.text.learned() == {}
    assert math.isnan(rates.learned_busy("model-7"))
    view.apply(entry(2, GOOD))  # the pool's own model on its endpoint: learned
    assert all(math.isfinite(value) for value in learned(view))

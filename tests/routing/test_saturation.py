"""Saturation levels from engine metrics: FREE, SATURATED, OVERLOADED at the thresholds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.routing import WorkerTable
from kinference.routing.filters.saturation import (
    FREE,
    OVERLOADED,
    SATURATED,
    SMALL_CANDIDATES,
    SaturationConfig,
    SaturationFilter,
)


def Saturation(**config: float) -> SaturationFilter:
    return SaturationFilter(SaturationConfig(**config))  # type: ignore[arg-type]


NOW = 50.0
STALE_AFTER = 1.0


def levels(
    saturation: SaturationFilter, metrics: list[tuple[float | None, float | None]]
) -> list[int]:
    """Levels of workers whose engines just reported `(waiting, kv)` (None: unknown), read
    through the table as the router reads them: fresh signals, sliced to the candidates."""
    table = WorkerTable()
    slots = table.slots(f"10.0.0.{i}:8000" for i in range(len(metrics)))
    for slot, (queue, kv) in zip(slots, metrics, strict=True):
        table.set_engine(int(slot), waiting=queue, running=1, kv_usage=kv, scraped_at=NOW)
    waiting, kv_usage = table.engine_signals(NOW, STALE_AFTER)
    result: list[int] = saturation.levels(waiting[slots], kv_usage[slots]).tolist()
    return result


def test_defaults() -> None:
    assert SaturationConfig() == SaturationConfig(queue_depth=5, kv_cache=0.8)
    assert (FREE, SATURATED, OVERLOADED) == (0, 1, 2)


@pytest.mark.parametrize(
    ("waiting", "level"),
    [
        (0, FREE),
        (4, FREE),
        (4.9, FREE),
        (5, SATURATED),
        (9, SATURATED),
        (10, OVERLOADED),
        (99, OVERLOADED),
    ],
)
def test_queue_depth(waiting: float, level: int) -> None:
    assert levels(Saturation(), [(waiting, 0.0)]) == [level]


@pytest.mark.parametrize(
    ("kv", "level"),
    [
        (0.0, FREE),
        (0.79, FREE),
        (0.8, SATURATED),
        (0.89, SATURATED),
        (0.9, OVERLOADED),  # halfway from the threshold to full
        (1.0, OVERLOADED),
    ],
)
def test_kv_cache(kv: float, level: int) -> None:
    assert levels(Saturation(), [(0, kv)]) == [level]


def test_either_signal_counts_and_the_worse_wins() -> None:
    assert levels(Saturation(), [(5, 0.1), (0, 0.85), (10, 0.85), (6, 0.95), (1, 0.1)]) == [
        SATURATED,
        SATURATED,
        OVERLOADED,
        OVERLOADED,
        FREE,
    ]


def test_unknown_metrics_are_never_saturated() -> None:
    assert levels(Saturation(), [(None, None), (None, 0.99), (50, None), (None, 0.1)]) == [
        FREE,
        OVERLOADED,
        OVERLOADED,
        FREE,
    ]


def test_custom_thresholds() -> None:
    saturation = Saturation(queue_depth=1, kv_cache=0.5)
    assert levels(saturation, [(0, 0.0), (1, 0.0), (2, 0.0), (0, 0.5), (0, 0.75)]) == [
        FREE,
        SATURATED,
        OVERLOADED,
        SATURATED,
        OVERLOADED,
    ]


def test_levels_follow_the_slots_order() -> None:
    table = WorkerTable()
    a, b = table.slot("10.0.0.1:8000"), table.slot("10.0.0.2:8000")
    table.set_engine(b, waiting=10, running=0, kv_usage=0, scraped_at=NOW)
    waiting, kv = table.engine_signals(NOW, STALE_AFTER)
    slots = table.slots(["10.0.0.2:8000", "10.0.0.1:8000"])
    assert Saturation().levels(waiting[slots], kv[slots]).tolist() == [OVERLOADED, FREE]
    assert a == 0


def test_levels_of_plain_arrays() -> None:
    """One level per position of the (already sliced) candidate arrays."""
    waiting = np.array([0.0, 5.0, np.nan, 10.0])
    kv = np.array([0.95, 0.0, 0.8, np.nan])
    assert Saturation().levels(waiting, kv).tolist() == [
        OVERLOADED,
        SATURATED,
        SATURATED,
        OVERLOADED,
    ]
    assert Saturation().levels(np.array([]), np.array([])).tolist() == []


def test_a_stale_reading_is_never_saturated() -> None:
    """A saturated reading older than the staleness bound is unknown, and unknown is FREE."""
    table = WorkerTable()
    slots = table.slots(["10.0.0.1:8000", "10.0.0.2:8000"])
    table.set_engine(int(slots[0]), waiting=50, running=1, kv_usage=0.99, scraped_at=NOW)
    table.set_engine(int(slots[1]), waiting=50, running=1, kv_usage=0.99, scraped_at=NOW + 1)
    waiting, kv = table.engine_signals(NOW + STALE_AFTER, STALE_AFTER)
    assert Saturation().levels(waiting[slots], kv[slots]).tolist() == [OVERLOADED, OVERLOADED]
    waiting, kv = table.engine_signals(NOW + STALE_AFTER + 0.01, STALE_AFTER)
    assert Saturation().levels(waiting[slots], kv[slots]).tolist() == [FREE, OVERLOADED]


def test_the_request_own_cache_hit_leaves_the_kv_signal_out() -> None:
    saturation = Saturation(kv_cache=0.8, queue_depth=5)
    waiting = np.array([0.0, 0.0, 6.0])
    kv = np.array([0.85, 0.85, 0.1])
    cached = np.array([900.0, 100.0, 1000.0])
    got = saturation.levels_with_hits(waiting, kv, cached, 1000.0)
    # Mostly cached on 0: its KV use is not this request's; 1 holds too little of it; on 2
    # the queue still counts.
    assert got.tolist() == [FREE, SATURATED, SATURATED]


def test_a_document_stays_on_the_worker_whose_kv_cache_it_fills() -> None:
    """The holder's KV cache is over the threshold (a simulator counting the document once
    per running request): a question about the document still goes there; a cold prompt
    does not."""
    from kinference.routing.features import EngineReading
    from tests.routing.plugin_helpers import pool_router
    from tests.routing.plugin_helpers import system_query as query

    endpoints = ["10.0.0.1:8000", "10.0.0.2:8000"]
    now = 100.0
    router = pool_router(endpoints, now)

    document = "The tides follow the moon. " * 300
    router.remote_picked(endpoints[0], router.route(query(document, 0)).prefix_hashes)
    for endpoint, kv in zip(endpoints, (0.95, 0.1), strict=True):
        router.engine_reading(endpoint, True, EngineReading(0.0, 2.0, kv, scraped_at=now))
    local = router.route(query(document, 1)).local
    assert local is not None and local.endpoint == endpoints[0]
    cold = router.route(query("Another text entirely. " * 300, 2)).local
    assert cold is not None and cold.endpoint == endpoints[1]


readings = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-3, max_value=30).map(float),
    st.sampled_from([0.4, 0.45, 0.5, 0.8, 0.9, 0.95, 1.0]),
)


@settings(deadline=None, max_examples=300)
@given(
    st.lists(st.tuples(readings, readings), min_size=1, max_size=SMALL_CANDIDATES),
    st.integers(min_value=1, max_value=12),
    st.floats(min_value=0.01, max_value=1.0),
)
def test_any_saturated_is_whether_levels_shows_any_above_free(
    metrics: list[tuple[float | None, float | None]], depth: int, full: float
) -> None:
    saturation = Saturation(queue_depth=depth, kv_cache=full)
    table = WorkerTable()
    slots = table.slots(f"10.0.0.{i}:8000" for i in range(len(metrics)))
    for slot, (queue, kv) in zip(slots, metrics, strict=True):
        table.set_engine(int(slot), waiting=queue, running=1, kv_usage=kv, scraped_at=NOW)
    waiting, kv_usage = table.engine_signals(NOW, STALE_AFTER)
    shown = bool(saturation.levels(waiting[slots], kv_usage[slots]).any())
    assert saturation.any_saturated(waiting, kv_usage, slots.tolist()) == shown

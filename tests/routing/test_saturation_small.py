"""The saturation step's small forms and the context it shares with the choice.

`levels_with_hits_of` (Python floats, a handful of candidates) must say what
`levels_with_hits` says; a Pick with saturated candidates makes its context once, and the
context narrowed to the free ones is what making it for them alone would give."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.routing import Router, WorkerTable
from kinference.routing.attempt import Attempt
from kinference.routing.features import EngineReading
from kinference.routing.filters.saturation import (
    OVERLOADED,
    SATURATED,
    SMALL_CANDIDATES,
    SaturationConfig,
    free_positions,
)
from kinference.routing.filters.saturation import SaturationFilter as Saturation
from tests.routing.plugin_helpers import pool_router, system_query

NOW = 50.0
readings = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-3, max_value=30).map(float),
    st.sampled_from([0.4, 0.45, 0.5, 0.8, 0.9, 0.95, 1.0]),
)
cached_tokens = st.one_of(
    st.sampled_from([0.0, 499.0, 500.0, 1000.0]), st.floats(min_value=0.0, max_value=2000.0)
)


@settings(deadline=None, max_examples=300)
@given(
    st.lists(st.tuples(readings, readings, cached_tokens), min_size=1, max_size=SMALL_CANDIDATES),
    st.integers(min_value=1, max_value=12),
    st.floats(min_value=0.01, max_value=1.0),
    st.sampled_from([0.0, 0.5, 1.0, 1000.0, 1999.0]),
)
def test_levels_with_hits_of_says_what_levels_with_hits_says(
    metrics: list[tuple[float | None, float | None, float]],
    depth: int,
    full: float,
    prompt: float,
) -> None:
    saturation = Saturation(SaturationConfig(queue_depth=depth, kv_cache=full))
    table = WorkerTable()
    slots = table.slots(f"10.0.0.{i}:8000" for i in range(len(metrics)))
    for slot, (queue, kv, _) in zip(slots, metrics, strict=True):
        table.set_engine(int(slot), waiting=queue, running=1, kv_usage=kv, scraped_at=NOW)
    waiting, kv_usage = table.engine_signals(NOW, 1.0)
    cached = np.array([hit for *_, hit in metrics])
    expected = saturation.levels_with_hits(waiting[slots], kv_usage[slots], cached, prompt)
    got = saturation.levels_with_hits_of(waiting, kv_usage, slots.tolist(), cached.tolist(), prompt)
    assert got == expected.tolist()


ENDPOINTS = [f"10.0.0.{i}:8000" for i in range(1, 5)]


def _saturated_but_the_holder(router: Router, document: str) -> None:
    """Worker 0 holds the document, its KV cache over the threshold; 1 is saturated by
    its queue; 2 and 3 are free."""
    router.remote_picked(ENDPOINTS[0], router.route(system_query(document, 0)).prefix_hashes)
    for endpoint, (waiting, kv) in zip(
        ENDPOINTS, [(0.0, 0.95), (9.0, 0.1), (0.0, 0.1), (1.0, 0.2)], strict=True
    ):
        router.engine_reading(endpoint, True, EngineReading(waiting, 2.0, kv, scraped_at=NOW))


def test_a_pick_with_saturated_candidates_makes_its_context_once() -> None:
    router = pool_router(ENDPOINTS, NOW)
    document = "The tides follow the moon. " * 300
    _saturated_but_the_holder(router, document)
    made: list[int] = []
    context = router._context

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(1)
        return context(*args, **kwargs)

    router._context = counted  # type: ignore[method-assign]
    local = router.route(system_query(document, 1)).local
    assert local is not None and local.endpoint == ENDPOINTS[0]
    assert len(made) == 1


def test_the_narrowed_context_is_the_one_made_for_the_free_candidates() -> None:
    router = pool_router(ENDPOINTS, NOW)
    document = "The tides follow the moon. " * 300
    _saturated_but_the_holder(router, document)
    query = system_query(document, 1)
    policy = router.policy
    route = policy.config.resolve_model("m")
    assert route is not None
    attempt = Attempt(query, route, router._signals(policy.engine_stale_after_s))
    group = attempt.groups(route.primary)[0]
    slots = router._ready_slots(attempt, group)
    assert slots is not None
    whole, note = router._context(attempt, group, slots)
    free, narrowed = router._narrowed((whole, note), slots, [0, 2, 3])
    assert narrowed is not None
    fresh, fresh_note = router._context(attempt, group, slots[[0, 2, 3]])
    got = narrowed[0]
    assert free.tolist() == fresh.slots.tolist() and free.dtype == slots.dtype
    assert got.slots.tolist() == fresh.slots.tolist()
    assert got.cached_tokens.tolist() == fresh.cached_tokens.tolist()
    assert got.footprint == fresh.footprint
    assert (got.prompt_tokens, got.hashes, narrowed[1]) == (
        fresh.prompt_tokens, fresh.hashes, fresh_note,
    )  # fmt: skip
    assert got.memory_ahead == fresh.memory_ahead and got.memory_batch == fresh.memory_batch
    assert router._narrowed((whole, note), slots, [0, 1, 2, 3]) == (slots, (whole, note))


@settings(deadline=None, max_examples=200)
@given(st.lists(st.integers(min_value=0, max_value=2), max_size=40))
def test_free_positions_read_a_list_as_they_read_numpys_levels(levels: list[int]) -> None:
    expected = np.flatnonzero(np.array(levels, dtype=np.int8) < SATURATED).tolist()
    assert free_positions(levels) == expected
    assert free_positions(np.array(levels, dtype=np.int8)) == expected


def test_a_saturated_pool_keeps_numpys_levels_for_the_qos_fallback() -> None:
    router = pool_router(ENDPOINTS, NOW)
    for endpoint in ENDPOINTS:
        router.engine_reading(endpoint, True, EngineReading(9.0, 2.0, 0.95, scraped_at=NOW))
    query = system_query("The tides follow the moon. " * 300, 1)
    route = router.policy.config.resolve_model("m")
    assert route is not None
    attempt = Attempt(query, route, router._signals(router.policy.engine_stale_after_s))
    group = attempt.groups(route.primary)[0]
    assert router._try_pool(attempt, group) is None
    (busy,) = attempt.busy
    assert busy.levels.dtype == np.int8 and busy.levels.tolist() == [OVERLOADED] * 4

"""An engine's published KV-cache size as its prefix-index capacity (`Router.engine_reading`
-> `PrefixIndex.report`): from the first pick, in index blocks, lowered but never raised
past it by what reports teach, and hostile readings ignored."""

from __future__ import annotations

import math

import pytest

from kinference.routing import Router
from kinference.routing.features import EngineReading
from kinference.routing.prefix_capacity import MAX_CAPACITY_BLOCKS, CapacitySource
from tests.routing.plugin_helpers import pool_router, system_query

ENDPOINT = "10.0.0.1:8000"
DOCUMENT = "The tides follow the moon, and the harbour follows the tides. " * 60  # ~59 blocks


def read(router: Router, tokens: float | None, endpoint: str = ENDPOINT) -> None:
    reading = EngineReading(0, 0, 0.1, scraped_at=50.0, kv_capacity_tokens=tokens)
    router.engine_reading(endpoint, True, reading)


def place(router: Router, document: str, n: int) -> tuple[int, ...]:
    """Route and start a question on `document`; its blocks are recorded on its worker."""
    local = router.route(system_query(document, n)).local
    assert local is not None
    router.picked(local)
    router.flush_prefix_records()
    return local.hashes


def test_the_published_size_bounds_the_index_from_the_first_pick() -> None:
    """128 blocks of 16 tokens: 2,048 tokens, 128 index blocks of 64 bytes at the prior 4
    characters a token. Two documents of ~59 blocks fit, a third evicts most of the first
    (its deepest blocks, the least recently used): the index no longer predicts it cached
    (main kept 50,000 blocks a worker, and predicted a hit the engine no longer had, until
    a report fell short)."""
    router = pool_router([ENDPOINT], 50.0)
    slot = router.table.slot(ENDPOINT)
    read(router, 128 * 16)
    assert router.prefix.capacity[slot] == 128
    assert router.prefix.source(slot) is CapacitySource.ENGINE
    first = place(router, "First. " + DOCUMENT, 0)
    place(router, "Second. " + DOCUMENT, 1)
    assert router.prefix.match(first) == {slot: len(first)}  # both fit
    place(router, "Third. " + DOCUMENT, 2)
    assert router.prefix.match(first).get(slot, 0) < len(first) // 2
    footprint = router.prefix.footprint(router.table.slots([ENDPOINT]))
    assert footprint[0] <= 128


def test_the_conversion_follows_the_learned_characters_per_token() -> None:
    router = pool_router([ENDPOINT], 50.0)
    slot = router.table.slot(ENDPOINT)
    read(router, 1536 * 16)
    assert router.prefix.capacity[slot] == 1536
    for _ in range(3):  # the model makes 2 characters a token
        router.learning.text.observe("m", 2000.0, 1000.0)
    read(router, 1536 * 16)
    assert router.prefix.capacity[slot] == 768


def test_what_reports_teach_lowers_it_never_raises_it_past_the_engine() -> None:
    router = pool_router([ENDPOINT], 50.0)
    slot = router.table.slot(ENDPOINT)
    read(router, 1000 * 16)
    hashes = place(router, DOCUMENT, 0)
    router.prefix.shortfall(slot, hashes, 0, 300)  # kept nothing of blocks 300 old
    assert router.prefix.capacity[slot] == 300
    assert router.prefix.source(slot) is CapacitySource.LEARNED
    read(router, 1000 * 16)  # the next scrape says the same: what was learned stays
    assert router.prefix.capacity[slot] == 300
    router.prefix.confirmed(slot, 5000)  # a hit 5,000 blocks old: more than 300 kept
    assert router.prefix.capacity[slot] == 1000  # but no more than the engine holds
    assert router.prefix.source(slot) is CapacitySource.ENGINE
    read(router, 200 * 16)  # a restart with a smaller cache
    assert router.prefix.capacity[slot] == 200


@pytest.mark.parametrize("hostile", [0.0, -16.0, math.nan, math.inf, -math.inf])
def test_a_reading_that_says_no_size_changes_nothing(hostile: float) -> None:
    """Readings also come from other replicas (Redis), unchecked by this one's parser."""
    router = pool_router([ENDPOINT], 50.0)
    slot = router.table.slot(ENDPOINT)
    read(router, hostile)
    assert slot not in router.prefix.capacity
    assert router.prefix.source(slot) is CapacitySource.BOUND
    read(router, 1536 * 16)
    read(router, hostile)
    read(router, None)  # unknown (a failed scrape): the size is the engine's, still
    router.engine_reading(ENDPOINT, False, None)
    assert router.prefix.capacity[slot] == 1536


def test_a_huge_size_is_bounded_and_the_lru_bound_still_applies() -> None:
    router = pool_router([ENDPOINT], 50.0)
    slot = router.table.slot(ENDPOINT)
    read(router, 1e300)
    assert router.prefix.capacity[slot] == MAX_CAPACITY_BLOCKS
    assert router.prefix.source(slot) is CapacitySource.BOUND  # the index's own bound binds


def test_a_worker_that_leaves_forgets_its_size() -> None:
    router = pool_router([ENDPOINT], 50.0)
    slot = router.table.slot(ENDPOINT)
    read(router, 1536 * 16)
    router.learning.forget(slot)
    assert slot not in router.prefix.capacity and slot not in router.prefix.reported

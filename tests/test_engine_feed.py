"""EngineFeed: which endpoints a replica scrapes (alone, in a cluster, across reloads), and
each reading reaching the routing core and the other replicas."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from kinference.cluster.setup import EngineSharing
from kinference.config import Policy, parse_policy
from kinference.engine_feed import EngineFeed
from kinference.routing import Router
from kinference.routing.features import EngineReading
from kinference.workers import EngineSnapshot
from tests.workers.conftest import eventually
from tests.workers.fake_engine import FakeEngine
from tests.workers.pages import vllm_text


class Readings:
    """Stands in for the Router: the readings it was handed."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bool, EngineReading | None]] = []

    def engine_reading(self, endpoint: str, ready: bool, reading: EngineReading | None) -> None:
        self.seen.append((endpoint, ready, reading))


class Sharing:
    """Stands in for EngineSharing: leads the pools in `led`, records what it publishes."""

    def __init__(self, led: set[str]) -> None:
        self.led = led
        self.pools: frozenset[str] = frozenset()
        self.published: list[tuple[str, EngineSnapshot | None, bool]] = []

    def set_pools(self, pools: Collection[Any]) -> None:
        self.pools = frozenset(pool.ref for pool in pools if pool.engine != "none")

    def scrapes(self, pool: str) -> bool:
        return pool in self.led

    def publish(self, endpoint: str, snapshot: EngineSnapshot | None, ready: bool) -> None:
        self.published.append((endpoint, snapshot, ready))


def policy(**endpoints: list[str]) -> Policy:
    """Pools `name` of vLLM engines at `endpoints`; a pool named `static` has no engine."""
    lines = ["pools:"]
    for name, listed in endpoints.items():
        engine = "none" if name == "static" else "vllm"
        lines.append(f"  - {{name: {name}, endpoints: {listed}, models: [m], engine: {engine}}}")
    return parse_policy("\n".join(lines) + "\n")


@pytest.fixture
async def engine() -> AsyncIterator[FakeEngine]:
    size = 'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1536"} 1\n'
    started = await FakeEngine(text=vllm_text(2, 3, 0.5) + size).start()
    yield started
    await started.close()


def feed(start: Policy, readings: Readings) -> EngineFeed:
    return EngineFeed(start, cast(Router, readings), CollectorRegistry())


async def test_alone_it_scrapes_every_engine_pool_and_follows_reloads() -> None:
    engines = feed(policy(a=["10.0.0.1:8000"], static=["10.0.0.2:8000"]), Readings())
    assert engines.scraper.endpoints == {"10.0.0.1:8000"}  # a pool without engine: never
    engines.apply_policy(policy(a=["10.0.0.1:8000", "10.0.0.3:8000"], b=["10.0.0.4:8000"]))
    assert engines.scraper.endpoints == {"10.0.0.1:8000", "10.0.0.3:8000", "10.0.0.4:8000"}
    engines.apply_policy(policy(static=["10.0.0.1:8000"]))
    assert not engines.scraper.endpoints
    await engines.aclose()


async def test_in_a_cluster_it_scrapes_only_the_pools_it_leads() -> None:
    engines = feed(policy(a=["10.0.0.1:8000"], b=["10.0.0.2:8000"]), Readings())
    sharing = Sharing(led={"default/a"})
    engines.share(cast(EngineSharing, sharing))
    assert sharing.pools == {"default/a", "default/b"}  # told which pools have engines
    assert engines.scraper.endpoints == {"10.0.0.1:8000"}
    sharing.led = {"default/a", "default/b"}  # leadership changed: the sharing calls back
    engines.retarget()
    assert engines.scraper.endpoints == {"10.0.0.1:8000", "10.0.0.2:8000"}
    engines.apply_policy(policy(b=["10.0.0.2:8000"], c=["10.0.0.5:8000"]))
    assert sharing.pools == {"default/b", "default/c"}
    assert engines.scraper.endpoints == {"10.0.0.2:8000"}
    await engines.aclose()


async def test_a_scrape_reaches_the_router_and_the_other_replicas(engine: FakeEngine) -> None:
    readings = Readings()
    engines = feed(policy(a=[engine.endpoint]), readings)
    sharing = Sharing(led={"default/a"})
    engines.share(cast(EngineSharing, sharing))
    await engines.start()
    try:
        await eventually(lambda: bool(readings.seen), "a reading handed to the router")
    finally:
        await engines.aclose()
    endpoint, ready, reading = readings.seen[0]
    assert (endpoint, ready) == (engine.endpoint, True)
    assert reading is not None
    assert (reading.waiting, reading.running, reading.kv_usage) == (2, 3, 0.5)
    assert reading.kv_capacity_tokens == 1536 * 16
    assert sharing.published[0][0] == engine.endpoint
    assert sharing.published[0][2] is True

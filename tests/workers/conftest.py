"""Fixtures for the scraper tests: fake engines on free ports and scrapers wired to them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kinference.workers import EngineScraper, EngineSnapshot, LeanPages
from tests.workers.fake_engine import FakeEngine

# Upper bound for any state the scraper reaches on its own; tests poll, never sleep.
SETTLE_S = 10.0
_POLL_S = 0.002

EngineFactory = Callable[..., Awaitable[FakeEngine]]


async def eventually(condition: Callable[[], bool], what: str, within_s: float = SETTLE_S) -> None:
    """Poll `condition` until it holds, failing with `what` after `within_s` seconds."""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(_POLL_S)


@dataclass
class Harness:
    """A scraper, its registry, and every on_update call it made, in order."""

    scraper: EngineScraper
    registry: CollectorRegistry
    updates: list[tuple[str, EngineSnapshot | None, bool]] = field(default_factory=list)

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        value = self.registry.get_sample_value(name, labels or {})
        return 0.0 if value is None else value

    def scrapes(self, result: str) -> float:
        return self.metric("kinference_engine_scrapes_total", {"result": result})


HarnessFactory = Callable[..., Harness]


@pytest.fixture
async def fake_engine() -> AsyncIterator[EngineFactory]:
    """Start fake engines (`FakeEngine` keyword arguments); all close at teardown."""
    engines: list[FakeEngine] = []

    async def start(**kwargs: Any) -> FakeEngine:
        engine = await FakeEngine(**kwargs).start()
        engines.append(engine)
        return engine

    yield start
    for engine in engines:
        await engine.close()


@pytest.fixture
async def harness() -> AsyncIterator[HarnessFactory]:
    """Build scrapers with fast test defaults, overridable; all close at teardown."""
    client = LeanPages()  # what the app scrapes with
    built: list[Harness] = []

    def build(**overrides: Any) -> Harness:
        registry = CollectorRegistry()
        updates: list[tuple[str, EngineSnapshot | None, bool]] = []

        def record(endpoint: str, snapshot: EngineSnapshot | None) -> None:
            updates.append((endpoint, snapshot, scraper.ready(endpoint)))

        options: dict[str, Any] = {
            "interval_s": 0.01,
            "timeout_s": 1.0,
            "stale_after_s": 60.0,
            "failures_before_unready": 3,
            "on_update": record,
        }
        options.update(overrides)
        scraper = EngineScraper(client, registry=registry, **options)
        built.append(Harness(scraper, registry, updates))
        return built[-1]

    yield build
    for item in built:
        await item.scraper.aclose()
    await client.aclose()

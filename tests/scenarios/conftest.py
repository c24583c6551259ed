"""Fixtures for the scenario tests: fake engines on free ports (see helpers.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.scenarios.helpers import IDLE_KV, Engines, EnginesFactory
from tests.workers.fake_engine import FakeEngine
from tests.workers.pages import vllm_text


@pytest.fixture
async def start_engines() -> AsyncIterator[EnginesFactory]:
    """Start `n` idle fake engines (waiting 0, running 0, KV 0.1); all close at teardown."""
    started: list[FakeEngine] = []

    async def start(n: int) -> Engines:
        engines = []
        for _ in range(n):
            engine = await FakeEngine(text=vllm_text(0, 0, IDLE_KV)).start()
            started.append(engine)
            engines.append(engine)
        return Engines(engines)

    yield start
    for engine in started:
        await engine.close()

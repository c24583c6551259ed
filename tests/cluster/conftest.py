"""Real redis-server processes on free ports, and replicas sharing one of them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from kinference.cluster.connection import RedisClient, connect
from kinference.config import parse_policy
from loadtest.redis_server import RedisServer
from tests.cluster.test_leases import Clocks
from tests.conftest import MODEL, PickerFactory, RunningPicker
from tests.scenarios.conftest import start_engines  # noqa: F401 (a fixture, shared)

CLUSTER_POLICY = f"""
pools:
  - namespace: default
    name: chat
    endpoints: ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"]
    models: ["{MODEL}"]
"""


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[RedisClient]:
    """A client of `redis_server`."""
    redis = connect(redis_server.url)
    yield redis
    await redis.aclose()


@pytest.fixture
def clocks() -> Clocks:
    """The leased budgets' clocks (`tests.cluster.test_leases.Clocks`)."""
    return Clocks()


@pytest.fixture
async def start_replicas(
    redis_server: RedisServer, start_picker: PickerFactory
) -> AsyncIterator[Any]:
    """Start `count` replicas sharing `redis_server`, each with its own client."""

    async def start(
        count: int, policy: str = CLUSTER_POLICY, **settings: Any
    ) -> list[RunningPicker]:
        settings.setdefault("redis_url", redis_server.url)
        return [await start_picker(parse_policy(policy), **settings) for _ in range(count)]

    yield start

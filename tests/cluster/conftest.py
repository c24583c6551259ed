"""Real redis-server processes on free ports, and replicas sharing one of them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from kinference.cluster.blacklist import SharedBlacklist
from kinference.cluster.connection import RedisClient, connect
from kinference.config import parse_policy
from kinference.routing.health import CooldownPolicy, ProviderHealth
from loadtest.redis_server import RedisServer
from tests.cluster.blacklists import KEYS, Replica, ReplicaFactory
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


@pytest.fixture(scope="module")
def shared_redis() -> Iterator[RedisServer]:
    """One redis-server for a module's tests (`flushed_redis` empties it for each)."""
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def flushed_redis(shared_redis: RedisServer) -> RedisServer:
    shared_redis.cli("FLUSHALL")
    return shared_redis


@pytest.fixture
async def blacklist_replica(flushed_redis: RedisServer) -> AsyncIterator[ReplicaFactory]:
    """A replica named `instance`: its own health, client and blacklist, on `flushed_redis`
    (or on `url`)."""
    opened: list[RedisClient] = []

    def make(instance: str, policy: CooldownPolicy | None = None, url: str = "") -> Replica:
        client = connect(url or flushed_redis.url)
        opened.append(client)
        health = ProviderHealth(policy or CooldownPolicy())
        return Replica(health, SharedBlacklist(client, KEYS, health, instance=instance))

    yield make
    for client in opened:
        await client.aclose()

"""A Redis without some commands (`rename-command X ""`, as managed services do)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from loadtest.redis_server import RedisServer
from tests.api.helpers import wait_until
from tests.cluster.test_provider_blacklist import POLICY, blacklist_on, cooled
from tests.conftest import RunningPicker

SAMPLES = 10


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(extra_args=("--rename-command", "INFO", "")).start()
    yield server
    server.stop()


def connected(replica: RunningPicker) -> bool:
    cluster = replica.app.cluster
    return cluster is not None and cluster.connected and cluster.gap() is None


async def test_a_redis_without_info_is_not_unavailable(start_replicas) -> None:
    a, b = await start_replicas(2, POLICY)
    await wait_until(lambda: connected(a) and connected(b), 10.0, "connected")
    seen = []
    for _ in range(SAMPLES):
        seen.append(connected(a) and connected(b))
        await asyncio.sleep(0.1)
    assert all(seen), seen
    await blacklist_on(a)
    await wait_until(lambda: cooled(b), 10.0, "b adopts a's blacklisting")

"""Writes that Redis applied but whose reply never came back (a connection cut after the
command, a timeout while Redis was stalled): retried, they must not count twice.

A proxy between the budget and a real redis-server (`tests.cluster.proxy.CuttingProxy`)
lets the next command naming a marker through and then cuts the connection before the
reply."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.exceptions import RedisError

from kinference.cluster.connection import RedisClient, connect
from kinference.cluster.leases import LeasedBudget
from loadtest.redis_server import RedisServer
from tests.cluster.proxy import CuttingProxy
from tests.cluster.test_leases import KEYS, TENANT, Clocks, leased_sum, until_ok


@pytest.fixture
async def proxied(redis_server: RedisServer) -> AsyncIterator[tuple[CuttingProxy, LeasedBudget]]:
    """The proxy, and a budget whose Redis client goes through it."""
    proxy = CuttingProxy(redis_server.port)
    port = await proxy.start()
    client = connect(f"redis://127.0.0.1:{port}/0")
    clocks = Clocks()
    budget = LeasedBudget(
        client, KEYS, replicas=lambda: 1, instance="a", clock=clocks.clock, wall=clocks.wall
    )
    yield proxy, budget
    await client.aclose()
    await proxy.close()


async def cut_once(proxy: CuttingProxy, budget: LeasedBudget, marker: bytes) -> None:
    """One lease round whose command naming `marker` is applied but not answered."""
    proxy.marker = marker
    with pytest.raises((RedisError, OSError)):
        await budget.sync_once()
    assert proxy.cuts == 1
    await until_ok(budget.sync_once)


async def test_usage_whose_reply_was_lost_is_not_added_twice(
    proxied: tuple[CuttingProxy, LeasedBudget], client: RedisClient
) -> None:
    proxy, budget = proxied
    assert budget.exhausted(TENANT, 100_000) is None
    await budget.sync_once()  # a lease (and the scripts loaded): next rounds send the usage
    budget.record(TENANT, 100_000, 300)
    await cut_once(proxy, budget, KEYS.usage(TENANT).encode())
    usage = await client.hgetall(KEYS.usage(TENANT))
    assert sum(int(tokens) for tokens in usage.values()) == 300


async def test_charges_whose_reply_was_lost_are_not_charged_twice(
    proxied: tuple[CuttingProxy, LeasedBudget], client: RedisClient
) -> None:
    """The lease call charges what this replica spent beyond its leases and grants a
    slice; applied without an answer and sent again, it charged twice and granted twice."""
    proxy, budget = proxied
    budget.exhausted("warm-up", 1_200)
    await budget.sync_once()  # the script loaded: the cut call is an EVALSHA that runs
    assert budget.exhausted(TENANT, 1_200) is None  # its one request before any lease
    budget.record(TENANT, 1_200, 300)  # charged beyond the leases
    await cut_once(proxy, budget, KEYS.leases(TENANT).encode())
    await until_ok(budget.sync_once)
    assert await leased_sum(client) == 300 + budget.balance(TENANT)  # each once

"""The lease loop's pace (`cluster.setup.leased_budget`'s step, run as the node runs it):
idle with no tenant, a tenant's first use leases at once, busy rounds every BUDGET_SYNC_S."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from kinference.cluster.connection import RedisClient
from kinference.cluster.keys import Keys
from kinference.cluster.leases import LeasedBudget
from kinference.cluster.setup import BUDGET_MIN_GAP_S, Clients, leased_budget
from kinference.settings import Settings

TENANT = "team-a"
LIMIT = 100_000


@pytest.fixture
async def loop(client: RedisClient) -> AsyncIterator[LeasedBudget]:
    """A budget whose step runs in the background as `ClusterNode._run` runs it."""
    clients = Clients(redis=client, reader=client, keys=Keys("test:"), instance="r1")
    budget, step = leased_budget(clients, lambda: 1, Settings())
    task = asyncio.create_task(_run(step))
    yield budget
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _run(step: Callable[[], Awaitable[None]]) -> None:
    while True:
        await step()
        await asyncio.sleep(BUDGET_MIN_GAP_S)


async def rounds_in(budget: LeasedBudget, seconds: float) -> int:
    before = budget._rounds
    await asyncio.sleep(seconds)
    return budget._rounds - before


async def test_with_no_tenant_the_loop_sleeps(loop: LeasedBudget) -> None:
    await asyncio.sleep(0.2)  # the first round PINGs: connected
    assert loop.connected
    assert await rounds_in(loop, 1.0) == 0  # was 10 a second
    assert loop.idle


async def test_a_new_tenant_leases_at_once_then_rounds_keep_their_pace(
    loop: LeasedBudget,
) -> None:
    await asyncio.sleep(0.2)
    assert loop.idle
    started = time.monotonic()
    assert loop.exhausted(TENANT, LIMIT) is None  # its first request: a round begins
    await asyncio.wait_for(loop.answered(TENANT), 0.5)
    while loop.balance(TENANT) == 0:
        assert time.monotonic() - started < 0.2  # leased within one ~0.1 s round
        await asyncio.sleep(0.005)
    assert not loop.idle
    assert 5 <= await rounds_in(loop, 1.0) <= 12  # a tenant known: every BUDGET_SYNC_S


async def test_a_lost_connection_wakes_an_idle_loop(loop: LeasedBudget) -> None:
    await asyncio.sleep(0.2)
    assert loop.idle
    loop.set_connected(False)
    assert not loop.idle
    await asyncio.sleep(0.05)
    assert loop.connected  # a round PINGed at once

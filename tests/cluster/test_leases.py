"""LeasedBudget against real redis-server processes: one tenant budget across replicas."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

import pytest
from redis.exceptions import RedisError

from kinference.cluster import lease_state, leases
from kinference.cluster.connection import RedisClient
from kinference.cluster.keys import Keys
from kinference.cluster.lease_state import LEASE_LIFE_S
from kinference.cluster.leases import LeasedBudget
from kinference.config import parse_policy
from kinference.routing import TenantGate
from loadtest.redis_server import RedisServer

KEYS = Keys("test:")
TENANT = "team-a"
DEADLINE_S = 5.0


class Clocks:
    """A wall clock (epoch seconds) and a monotonic clock that move together."""

    def __init__(self) -> None:
        self.now = float(int(time.time()))

    def wall(self) -> float:
        return self.now

    def clock(self) -> float:
        return self.now - 1_000_000_000.0


def budget(redis: RedisClient, clocks: Clocks, replicas: int = 3) -> LeasedBudget:
    return LeasedBudget(
        redis, KEYS, replicas=lambda: replicas, clock=clocks.clock, wall=clocks.wall
    )


async def leased_sum(redis: RedisClient, tenant: str = TENANT) -> int:
    fields = await redis.hgetall(KEYS.leases(tenant))
    return sum(int(value) for field, value in fields.items() if field.isdigit())  # no marks


async def until_ok(sync: Callable[[], Awaitable[None]]) -> None:
    """Retry a sync round until Redis answers (a restarted server, stale pooled sockets)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            await sync()
            return
        except (RedisError, OSError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.01)  # polling, bounded by the deadline


@pytest.mark.parametrize("sync_every", [1, 4, 11])
async def test_three_replicas_share_one_budget(
    client: RedisClient, clocks: Clocks, sync_every: int
) -> None:
    limit, sizes = 3_000, (7, 61, 23, 90)
    replicas = [budget(client, clocks) for _ in range(3)]
    admitted, rejected_in_a_row, pick = 0, 0, 0
    while rejected_in_a_row < 30 and pick < 10_000:
        replica, tokens = replicas[pick % 3], sizes[pick % len(sizes)]
        if replica.exhausted(TENANT, limit) is None:
            replica.record(TENANT, limit, tokens)  # sequential: reported before the next pick
            admitted += tokens
            rejected_in_a_row = 0
        else:
            rejected_in_a_row += 1
        pick += 1
        if pick % sync_every == 0:
            await replicas[(pick // sync_every) % 3].sync_once()
        clocks.now += 0.001  # well inside one lease life
    slice_size = limit // (4 * 3)
    assert limit - slice_size <= admitted <= limit + 3 * max(sizes)
    # Redis never counts less than was spent: leases plus what was spent beyond them.
    for replica in replicas:
        await replica.sync_once()
    assert await leased_sum(client) >= admitted


async def test_a_new_tenant_is_admitted_at_once_then_leased(
    client: RedisClient, clocks: Clocks
) -> None:
    replica = budget(client, clocks)
    assert not inspect.iscoroutinefunction(replica.exhausted)
    assert replica.exhausted(TENANT, 1_200) is None  # before any lease: its one request
    assert replica.wakeup.is_set()
    replica.record(TENANT, 1_200, 50)
    reason = replica.exhausted(TENANT, 1_200)
    assert reason is not None
    assert "budget" in reason
    await replica.sync_once()
    assert replica.balance(TENANT) == 1_200 // 12
    assert replica.exhausted(TENANT, 1_200) is None
    assert await leased_sum(client) == 50 + 100  # the request spent unleased, and a slice


async def test_a_pick_waits_for_the_lease_round_it_asked_for(
    client: RedisClient, clocks: Clocks
) -> None:
    replica = budget(client, clocks)
    await replica.answered(TENANT)  # a tenant never seen: nothing to wait for
    assert replica.exhausted(TENANT, 1_200) is None  # its one request before any lease
    replica.record(TENANT, 1_200, 50)
    waiting = asyncio.create_task(replica.answered(TENANT))
    await asyncio.sleep(0)
    assert not waiting.done()  # no round has answered since the credit was spent
    await replica.sync_once()
    async with asyncio.timeout(DEADLINE_S):
        await waiting
    assert replica.exhausted(TENANT, 1_200) is None  # the lease came: admitted, not refused


async def test_a_refused_lease_ends_the_wait_and_the_pick_is_rejected(
    client: RedisClient, clocks: Clocks
) -> None:
    other, replica = budget(client, clocks), budget(client, clocks)
    other.record(TENANT, 1_200, 1_200)  # the whole minute, charged by another replica
    await other.sync_once()
    assert replica.exhausted(TENANT, 1_200) is None
    replica.record(TENANT, 1_200, 10)
    waiting = asyncio.create_task(replica.answered(TENANT))
    await replica.sync_once()
    async with asyncio.timeout(DEADLINE_S):
        await waiting
    reason = replica.exhausted(TENANT, 1_200)
    assert reason is not None and "1210 leased" in reason
    await replica.answered(TENANT)  # refused: later Picks do not wait again
    assert replica.exhausted(TENANT, 1_200) is not None


async def test_the_wait_is_bounded_and_skipped_while_redis_is_away(
    client: RedisClient, clocks: Clocks, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(leases, "LEASE_WAIT_S", 0.05)
    replica = budget(client, clocks)
    replica.exhausted(TENANT, 1_200)
    replica.record(TENANT, 1_200, 10)
    async with asyncio.timeout(DEADLINE_S):
        await replica.answered(TENANT)  # no round runs: it gives up after LEASE_WAIT_S
    assert replica.exhausted(TENANT, 1_200) is not None
    replica.set_connected(False)
    waiting = asyncio.create_task(replica.answered(TENANT))
    await asyncio.sleep(0)
    assert waiting.done()  # offline: the budget answers from its share at once


async def test_through_the_tenant_gate(client: RedisClient, clocks: Clocks) -> None:
    policy = parse_policy('tenants:\n  - {tenant: "*", tokens_per_minute: 100}\n')
    shared = budget(client, clocks, replicas=1)
    gate = TenantGate(budget=shared)
    assert gate.check(policy, "t1", ("m",), "BATCH") is None
    gate.record(policy, "t1", 120)
    reason = gate.check(policy, "t1", ("m",), "BATCH")
    assert reason is not None
    assert reason.text.startswith("tenant 't1' used its budget")
    assert gate.used("t1") == 120
    await shared.sync_once()
    assert gate.check(policy, "t1", ("m",), "BATCH") is not None  # 120 of 100 is charged


async def test_a_rejection_says_when_the_leases_window_frees(
    client: RedisClient, clocks: Clocks
) -> None:
    policy = parse_policy('tenants:\n  - {tenant: "*", tokens_per_minute: 100}\n')
    shared = budget(client, clocks, replicas=1)
    gate = TenantGate(budget=shared)
    assert shared.frees_in("t1", 100) is None  # never seen: cannot tell
    assert gate.check(policy, "t1", ("m",), "BATCH") is None
    gate.record(policy, "t1", 120)  # beyond any lease: charged to the next second
    await shared.sync_once()
    rejection = gate.check(policy, "t1", ("m",), "BATCH")
    assert rejection is not None and rejection.retry_after_s == 61
    clocks.now += 61
    rejection = gate.check(policy, "t1", ("m",), "BATCH")  # the round has not run yet
    assert rejection is not None and rejection.retry_after_s == 1
    await shared.sync_once()  # that second left the window: a lease is granted
    assert gate.check(policy, "t1", ("m",), "BATCH") is None
    shared.set_connected(False)  # Redis away: this replica's share of its own window
    gate.record(policy, "t1", 150)
    clocks.now += 30
    rejection = gate.check(policy, "t1", ("m",), "BATCH")
    assert rejection is not None and rejection.retry_after_s == 31


async def test_unspent_leases_are_handed_back(client: RedisClient, clocks: Clocks) -> None:
    replica = budget(client, clocks, replicas=1)
    assert replica.exhausted(TENANT, 400) is None
    await replica.sync_once()
    replica.record(TENANT, 400, 30)
    assert await leased_sum(client) == 100
    clocks.now += LEASE_LIFE_S + 20  # the tenant went quiet: the lease expired unspent
    await replica.sync_once()  # hands the 70 back
    await replica.sync_once()
    assert await leased_sum(client) == 30
    assert replica.balance(TENANT) == 0


async def test_a_killed_redis_blocks_no_pick_and_gets_the_outage_usage_back(
    redis_server: RedisServer, client: RedisClient, clocks: Clocks
) -> None:
    limit = 1_200  # 400 per replica per minute while Redis is away; slices of 100
    replica = budget(client, clocks)
    assert replica.exhausted(TENANT, limit) is None
    await replica.sync_once()
    assert replica.balance(TENANT) == 100
    redis_server.kill()
    spent, started = 0, time.monotonic()
    while replica.exhausted(TENANT, limit) is None:  # the lease, then its one credit
        replica.record(TENANT, limit, 40)
        spent += 40
    assert spent == 120
    with pytest.raises((RedisError, OSError)):
        await replica.sync_once()  # wants a lease: Redis is gone
    assert not replica.connected
    while replica.exhausted(TENANT, limit) is None:  # now limit / 3 a minute
        replica.record(TENANT, limit, 40)
        spent += 40
        clocks.now += 0.5
    assert time.monotonic() - started < 1.0  # no pick waited on the dead server
    assert 400 <= spent <= 400 + 40
    assert replica.buffered() > 0
    redis_server.start()
    await until_ok(replica.sync_once)
    assert replica.connected
    assert replica.buffered() == 0
    await replica.sync_once()  # the call found the hash lost: the charges before it go again
    # Everything spent beyond the 100 leased before the crash, the 100 leased (re-seeded: the
    # restart lost them) and the slice leased now; nothing twice (700 for 400 before).
    assert await leased_sum(client) == spent + replica.balance(TENANT)
    usage = await client.hgetall(KEYS.usage(TENANT))
    assert sum(int(tokens) for tokens in usage.values()) == spent
    assert await client.smembers(KEYS.tenants()) == {TENANT.encode()}


async def test_a_paused_redis_blocks_no_pick(
    redis_server: RedisServer, client: RedisClient, clocks: Clocks
) -> None:
    replica = budget(client, clocks, replicas=1)
    replica.exhausted(TENANT, 1_000)
    replica.record(TENANT, 1_000, 10)
    redis_server.pause()
    try:
        sync = asyncio.create_task(replica.sync_once())
        await asyncio.sleep(0)  # the round is now waiting on the stopped server
        started = time.monotonic()
        for _ in range(100):
            replica.exhausted(TENANT, 1_000)
        assert time.monotonic() - started < 0.1
        assert not sync.done()
    finally:
        redis_server.resume()
    try:
        await sync
    except (RedisError, OSError):
        assert not replica.connected  # timed out: the next round brings it back
    await until_ok(replica.sync_once)
    # A round that timed out may still have run: charged at least once, never lost.
    assert await leased_sum(client) >= 10 + replica.balance(TENANT) > 10


async def test_the_outage_buffer_is_bounded_and_only_the_window_is_republished(
    client: RedisClient, clocks: Clocks, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lease_state, "BUFFER_LIMIT", 70)
    replica = budget(client, clocks, replicas=1)
    replica.set_connected(False)
    for _ in range(80):  # one entry per second, for 80 seconds
        assert replica.exhausted(TENANT, 10_000) is None
        replica.record(TENANT, 10_000, 1)
        clocks.now += 1
    assert replica.buffered() == 70  # seconds 11..80 (charged to the second after)
    assert replica.dropped == 10
    await replica.sync_once()
    assert replica.connected
    # Of the 70 seconds kept, the last 60 (21..80) are still in the minute before second 80.
    assert await leased_sum(client) == 60 + replica.balance(TENANT)


async def test_a_lease_counts_for_a_minute_after_its_last_spendable_second(
    client: RedisClient, clocks: Clocks
) -> None:
    replica, granted = budget(client, clocks, replicas=1), int(clocks.now)
    assert replica.exhausted(TENANT, 400) is None
    await replica.sync_once()  # 100 leased now, spendable for LEASE_LIFE_S
    clocks.now += LEASE_LIFE_S - 1
    replica.record(TENANT, 400, 100)  # spent in its last second
    clocks.now += 59
    assert replica.exhausted(TENANT, 400) is None  # in use again (on its credit)
    await replica.sync_once()  # 60 s after the grant: the spend is 59 s old, still counted
    assert replica.balance(TENANT) == 100
    first = await client.hget(KEYS.leases(TENANT), str(granted + LEASE_LIFE_S))
    assert first == b"100"  # charged at the end of its life, not at its grant
    assert await leased_sum(client) == 200
    clocks.now += 2  # the first lease is now a minute past its life: out of the window
    replica.record(TENANT, 400, 100)
    await replica.sync_once()
    assert await leased_sum(client) == 100 + replica.balance(TENANT)


async def test_a_round_with_nothing_to_send_finds_redis_back(
    redis_server: RedisServer, client: RedisClient, clocks: Clocks
) -> None:
    replica = budget(client, clocks)
    await replica.sync_once()  # nothing to send, nothing asked
    replica.set_connected(False)
    await replica.sync_once()  # a PING
    assert replica.connected
    redis_server.kill()
    replica.set_connected(False)
    with pytest.raises((RedisError, OSError)):
        await replica.sync_once()
    assert not replica.connected

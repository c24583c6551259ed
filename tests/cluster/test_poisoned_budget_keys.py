"""Tenant budget keys of another type (set by hand, or by a tool sharing the prefix).

A leases hash, usage hash, tenants set or usage-batch key of another type failed every
lease round with WRONGTYPE (h199): one junk key of one tenant left every tenant behind it
unleased and the budget offline for as long as the key lived, and a usage batch failed
halfway was added again, in part, at each retry. Now such a key is no budget of ours: its
tenant is budgeted locally (its offline share), the other tenants lease as before, and
usage skips the key.
"""

from __future__ import annotations

import pytest

from kinference.cluster.connection import RedisClient
from kinference.cluster.keys import Keys
from kinference.cluster.leases import LeasedBudget
from tests.cluster.test_leases import Clocks

KEYS = Keys("test:")
LIMIT = 6_000


@pytest.fixture
def replica(client: RedisClient, clocks: Clocks) -> LeasedBudget:
    """One of two replicas' budgets, on `clocks`."""
    return LeasedBudget(client, KEYS, replicas=lambda: 2, clock=clocks.clock, wall=clocks.wall)


async def usage(redis: RedisClient, tenant: str) -> int:
    return sum(int(tokens) for tokens in (await redis.hgetall(KEYS.usage(tenant))).values())


async def round_ok(replica: LeasedBudget) -> None:
    """A lease round that does not fail for the junk keys."""
    await replica.sync_once()  # raised WRONGTYPE: every round, for every tenant
    assert replica.connected and not replica.offline


async def test_a_leases_key_of_another_type_leaves_the_other_tenants_leased(
    client: RedisClient, clocks: Clocks, replica: LeasedBudget
) -> None:
    await client.set(KEYS.leases("junk"), "not a hash")
    for tenant in ("junk", "team-a"):  # the junk tenant first: its call goes first
        assert replica.exhausted(tenant, LIMIT) is None
    await round_ok(replica)
    assert replica.balance("team-a") > 0
    # The junk tenant is budgeted here alone: its share, then refused with a reason.
    assert replica.exhausted("junk", LIMIT) is None
    replica.record("junk", LIMIT, LIMIT)
    assert replica.exhausted("junk", LIMIT) is not None
    assert await client.get(KEYS.leases("junk")) == b"not a hash"  # not ours to delete
    await client.delete(KEYS.leases("junk"))  # fixed: leased from Redis again
    clocks.now += 61
    replica.exhausted("junk", LIMIT)
    await replica.sync_once()
    assert replica.balance("junk") > 0


async def test_a_usage_key_of_another_type_is_skipped_and_the_rest_counted_once(
    client: RedisClient, replica: LeasedBudget
) -> None:
    await client.set(KEYS.usage("junk"), "not a hash")
    for tenant in ("team-a", "junk", "team-b"):
        replica.exhausted(tenant, LIMIT)
        replica.record(tenant, LIMIT, 100)
    await round_ok(replica)
    for tenant in ("team-a", "team-b"):
        replica.record(tenant, LIMIT, 10)
    await replica.sync_once()
    assert (await usage(client, "team-a"), await usage(client, "team-b")) == (110, 110)
    assert await client.get(KEYS.usage("junk")) == b"not a hash"


async def test_a_tenants_set_or_batch_key_of_another_type_fails_no_round(
    client: RedisClient, replica: LeasedBudget
) -> None:
    await client.set(KEYS.tenants(), "not a set")
    await client.rpush(KEYS.usage_batch(""), "not a string")
    replica.exhausted("team-a", LIMIT)
    replica.record("team-a", LIMIT, 100)
    await replica.sync_once()
    replica.record("team-a", LIMIT, 10)
    await round_ok(replica)
    assert await usage(client, "team-a") == 110

"""Leased tenant budgets across an empty Redis restart (unit level, one real redis-server)."""

from __future__ import annotations

import random

from kinference.cluster.connection import RedisClient
from kinference.cluster.lease_state import IDLE_S
from kinference.cluster.lease_writes import RECOVER_S
from kinference.cluster.leases import LeasedBudget
from loadtest.redis_server import RedisServer
from tests.cluster.test_leases import KEYS, TENANT, Clocks, leased_sum, until_ok

LIMIT = 1_200  # slices of 150 with two replicas


def replica(redis: RedisClient, clocks: Clocks, name: str) -> LeasedBudget:
    return LeasedBudget(
        redis, KEYS, replicas=lambda: 2, instance=name, clock=clocks.clock, wall=clocks.wall
    )


async def spend(budget: LeasedBudget, clocks: Clocks, rounds: int) -> int:
    """Spend 100 tokens whenever admitted, a lease round after each; returns the tokens."""
    spent = 0
    for _ in range(rounds):
        if budget.exhausted(TENANT, LIMIT) is None:
            budget.record(TENANT, LIMIT, 100)
            spent += 100
        await until_ok(budget.sync_once)
        clocks.now += 0.1
    return spent


async def test_a_replica_re_seeds_a_lost_hash_it_has_no_other_reason_to_call_for(
    redis_server: RedisServer, client: RedisClient, clocks: Clocks
) -> None:
    """`a` spent most of the minute, then its callers of the tenant moved to `b`: it has
    nothing to lease or hand back, so no lease round called for the tenant, and after an
    empty restart its charges were never sent again: `b` was granted the minute anew."""
    a = replica(client, clocks, "a")
    spent = await spend(a, clocks, 12)
    assert spent >= 1_000
    clocks.now += IDLE_S + 1  # a's leases expired; this round hands back what was left
    await a.sync_once()
    assert await leased_sum(client) == spent
    redis_server.restart()
    a.set_connected(False)  # the node tells the budget when any loop fails on the restart
    await until_ok(a.sync_once)  # the first round to reach Redis: a's mark is gone
    await until_ok(a.sync_once)  # the charges, sent again
    assert await leased_sum(client) == spent
    clocks.now += RECOVER_S
    b = replica(client, clocks, "b")
    b_spent = await spend(b, clocks, 30)
    assert spent + b_spent <= LIMIT + 100, b_spent  # b's one request beyond its leases


async def test_eight_replicas_joining_and_leaving_across_a_restart_never_overgrant(
    redis_server: RedisServer, client: RedisClient, clocks: Clocks
) -> None:
    """Four replicas spend; two join; one leaves (its charges stay in Redis); Redis restarts
    empty (every live replica's loops fail, as the node tells the budget); two more join
    and another leaves. Over the minute the cluster admits at most the budget plus one
    request per replica (its one beyond its leases), whatever order the rounds run in."""
    rng, limit = random.Random(7), 2_400
    live: list[LeasedBudget] = []

    def join(name: str) -> None:
        budget = LeasedBudget(client, KEYS, replicas=lambda: len(live), instance=name,
                              fail_closed=True, clock=clocks.clock, wall=clocks.wall)  # fmt: skip
        live.append(budget)

    for name in "abcd":
        join(name)
    admitted = 0
    for step in range(80):
        if step == 10:
            join("e")
            join("f")
        if step == 20:
            live.pop(1)  # b leaves after the restart re-seeded: its charges are in the hash
        if step == 15:
            redis_server.restart()
            for budget in live:
                budget.set_connected(False)
        if step == 25:
            join("g")
            join("h")
            live.pop(0)
        for budget in rng.sample(live, len(live)):
            if budget.exhausted(TENANT, limit) is None:
                budget.record(TENANT, limit, 100)
                admitted += 100
            await until_ok(budget.sync_once)
        clocks.now += 0.05
    assert limit - 800 <= admitted <= limit + 8 * 100, admitted

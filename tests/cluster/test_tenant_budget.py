"""A tenant's token budget holds across replicas: never budget times replicas."""

from __future__ import annotations

import asyncio
import time

from kinference.cluster.leases import LeasedBudget
from kinference.v1 import picker_pb2 as pb
from loadtest.redis_server import RedisServer
from tests.api.helpers import chat_body, push
from tests.conftest import MODEL, RunningPicker

LIMIT = 1_000  # tokens per minute
REQUEST_TOKENS = 100
POLICY = f"""
pools:
  - {{namespace: default, name: chat, endpoints: ["10.0.0.1:8000"], models: ["{MODEL}"]}}
tenants:
  - {{tenant: team-a, tokens_per_minute: {LIMIT}}}
"""


async def admitted(replica: RunningPicker, within_s: float = 0.5) -> bool:
    """Pick (retrying while a lease may still be on its way) and report 100 tokens."""
    deadline = time.monotonic() + within_s
    while True:
        pushed = await push(replica, chat_body())
        pick = await replica.client.pick(pushed.stream_id, tenant="team-a")
        if pick.outcome == pb.PickResponse.OK:
            await replica.client.final_token(
                pick.response_id, prompt_tokens=60, completion_tokens=40
            )
            return True
        assert pick.outcome == pb.PickResponse.POLICY_REJECTED, pick
        assert "budget" in pick.reason
        if time.monotonic() >= deadline:
            return False


async def test_the_cluster_admits_the_budget_once_not_once_per_replica(start_replicas) -> None:
    replicas = await start_replicas(3, POLICY)
    used = 0
    refused_in_a_row = 0
    turn = 0
    while refused_in_a_row < len(replicas) and used <= LIMIT * len(replicas):
        if await admitted(replicas[turn % len(replicas)]):
            used, refused_in_a_row = used + REQUEST_TOKENS, 0
        else:
            refused_in_a_row += 1
        turn += 1
    # At most one request over per replica; and the budget is not left unused either.
    assert LIMIT - REQUEST_TOKENS <= used <= LIMIT + len(replicas) * REQUEST_TOKENS, used


async def test_a_new_tenant_on_a_replica_that_found_redis_gone_gets_its_offline_share(
    start_replicas, redis_server: RedisServer
) -> None:
    """With no tenant in use a replica's lease loop sends nothing (h164: it sleeps), so only
    its other loops find Redis gone (here paused: commands time out, after 2 s). The budget
    must hear it from them: a new tenant then gets its offline share (limit / replicas a
    minute), not one request and then a refusal while its first lease round waits out the
    timeout."""
    (replica,) = await start_replicas(1, POLICY, redis_timeout_s=2.0)
    node, budget = replica.app.cluster, replica.app.router.tenants.budget
    assert node is not None and isinstance(budget, LeasedBudget)
    deadline = time.monotonic() + 30
    while not (node.connected and budget.idle):  # Redis answered both, nothing to send
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    redis_server.pause()
    try:
        while node.connected:  # its heartbeat times out
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        for _ in range(2):  # the second was refused before: no lease, no answer in time
            pushed = await push(replica, chat_body())
            pick = await replica.client.pick(pushed.stream_id, tenant="team-a")
            assert pick.outcome == pb.PickResponse.DEGRADED, pick  # the shared view is stale
            await replica.client.final_token(pick.response_id, prompt_tokens=60)
    finally:
        redis_server.resume()

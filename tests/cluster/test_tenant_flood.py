"""Caller-chosen tenant names cannot grow Redis or /metrics without bound (issue 15, item 2).

With a `"*"` rule that has a budget, every named tenant gets one. Concurrent callers name
more tenants than a replica tracks, each as long as allowed: the replica keeps budgets of
its own for MAX_TRACKED_TENANTS of them and counts the rest under OVERFLOW_TENANT, every
tenant key in Redis has a TTL, and the metrics keep their label cap.
"""

from __future__ import annotations

import asyncio

from kinference.config.tenants import MAX_TENANT_BYTES, MAX_TRACKED_TENANTS, OVERFLOW_TENANT
from kinference.v1 import picker_pb2 as pb
from loadtest.redis_server import RedisServer
from tests.api.helpers import chat_body, wait_until
from tests.conftest import MODEL

TENANTS = MAX_TRACKED_TENANTS + 100
CALLERS = 16
POLICY = f"""
pools:
  - {{namespace: default, name: chat, endpoints: ["10.0.0.1:8000"], models: ["{MODEL}"]}}
tenants:
  - {{tenant: "*", tokens_per_minute: 1000000}}
"""


def tenant(index: int) -> str:
    name = f"tenant-{index}-"
    return name + "x" * (MAX_TENANT_BYTES - len(name))  # as long as allowed


async def test_a_flood_of_tenants_is_bounded(start_replicas, redis_server: RedisServer) -> None:
    (replica,) = await start_replicas(1, POLICY)
    client, keys = replica.client, replica.app.cluster.keys
    body = chat_body()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(TENANTS):
        queue.put_nowait(index)

    async def caller() -> None:
        while not queue.empty():
            name = tenant(queue.get_nowait())
            for _ in range(100):  # the shared overflow budget may wait for its next lease
                pushed = await client.push([body], declared_length=len(body))
                pick = await client.pick(pushed.stream_id, tenant=name)
                if pick.outcome != pb.PickResponse.POLICY_REJECTED:
                    break
                await asyncio.sleep(0.01)
            assert pick.outcome in (pb.PickResponse.OK, pb.PickResponse.DEGRADED), pick
            await client.final_token(pick.response_id, prompt_tokens=5, completion_tokens=5)

    await asyncio.gather(*(caller() for _ in range(CALLERS)))
    overflow_usage = keys.usage(OVERFLOW_TENANT)
    await wait_until(
        lambda: redis_server.cli("EXISTS", overflow_usage) == "1", 10.0, "overflow usage"
    )
    await wait_until(
        lambda: int(redis_server.cli("SCARD", keys.tenants())) <= MAX_TRACKED_TENANTS,
        10.0,
        "the tenant set trimmed",
    )
    # Every tenant key expires: leases, usage, the index set.
    ttls = _scan_ttls(redis_server, f"{keys.root}tenant*")
    assert len(ttls) <= 2 * (MAX_TRACKED_TENANTS + 1) + 1, len(ttls)
    for key, ttl in ttls.items():
        assert ttl > 0, key
    # The metrics keep their own cap: 100 tenants and "(other)", prompt and completion each.
    samples = [
        labels
        for labels in _tenant_samples(replica.app.metrics.registry)
        if labels.get("tenant") is not None
    ]
    assert samples
    assert len({labels["tenant"] for labels in samples}) <= 101


def _scan_ttls(redis_server: RedisServer, pattern: str) -> dict[str, int]:
    """Each key matching `pattern` and its TTL, read over one connection in one round trip
    (a connection per key, as `RedisServer.cli` makes, took ~1.5 s for the ~2,000 keys)."""
    import redis

    client = redis.Redis(port=redis_server.port, decode_responses=True)
    try:
        keys = list(client.scan_iter(match=pattern, count=1000))
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.ttl(key)
        return dict(zip(keys, (int(ttl) for ttl in pipe.execute()), strict=True))
    finally:
        client.close()


def _tenant_samples(registry: object) -> list[dict[str, str]]:
    from prometheus_client import CollectorRegistry

    assert isinstance(registry, CollectorRegistry)
    return [
        dict(sample.labels)
        for family in registry.collect()
        if family.name == "kinference_tenant_tokens"
        for sample in family.samples
    ]

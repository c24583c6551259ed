"""Scenario "tenant-flood": callers name tenants of their choice, then Redis fills up.

One replica with a `"*"` rule that has a budget, and a redis-server of 64 MiB with
`noeviction` (the setup in which, before the fix, 3,500 flows with 20 kB tenants filled
Redis and the replicas stopped sharing state while reporting connected):

1. 200 flows with 20 kB tenants: each Pick must be INVALID_ARGUMENT (the body then aborted);
2. 3,500 flows (1,200 with --quick), 16 at a time, each with a tenant of its own of the
   longest length allowed: the tenant set in Redis, the tenant keys without a TTL, the
   tenant label values on /metrics and Redis's memory are recorded;
3. Redis then refuses writes (maxmemory set far under its use): the replica must read
   `kinference_redis_connected 0` and answer DEGRADED, and 1 / OK again once it is lifted.
"""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import grpc
import redis as redis_py

from kinference.client import PickerClient
from kinference.config.tenants import MAX_TENANT_BYTES, MAX_TRACKED_TENANTS
from kinference.v1 import picker_pb2 as pb
from loadtest.faults.harness import POLICY_YAML, Fleet, Replica, kinference_env, wait_for
from loadtest.faults.load import Tally, flow
from loadtest.faults.report import Row
from loadtest.flows import ACCEPTED_OUTCOMES, Body, chat_body
from loadtest.redis_server import RedisServer

POLICY = POLICY_YAML + 'tenants:\n  - {tenant: "*", tokens_per_minute: 1000000}\n'
CALLERS = 16
INVALID = frozenset({grpc.StatusCode.INVALID_ARGUMENT})


def _tenant(index: int) -> str:
    name = f"flood-{index}-"
    return name + "x" * (MAX_TENANT_BYTES - len(name))


async def _long_tenants(client: PickerClient, tally: Tally, count: int) -> None:
    body = chat_body(1024)
    for _ in range(count):
        tally.requests += 1
        pushed = await client.push(body.chunks, declared_length=body.length)
        try:
            await client.pick(pushed.stream_id, tenant="t" * 20_000)
            tally.fail("a 20 kB tenant was accepted")
        except grpc.aio.AioRpcError as error:
            tally.error(error, INVALID)


async def _flood(client: PickerClient, tally: Tally, count: int) -> None:
    body = chat_body(1024)
    names = iter(range(count))

    async def caller() -> None:
        for index in names:
            await _flow_as(client, body, tally, _tenant(index))

    await asyncio.gather(*(caller() for _ in range(CALLERS)))


async def _flow_as(client: PickerClient, body: Body, tally: Tally, tenant: str) -> None:
    """The whole flow for a request of `tenant`."""
    tally.requests += 1
    try:
        for _ in range(100):  # the shared overflow budget may wait for its next lease
            pushed = await client.push(body.chunks, declared_length=body.length)
            pick = await client.pick(pushed.stream_id, tenant=tenant)
            if pick.outcome != pb.PickResponse.POLICY_REJECTED:
                break
            tally.outcomes["POLICY_REJECTED (retried)"] += 1
            await asyncio.sleep(0.01)
        tally.outcomes[pb.PickResponse.Outcome.Name(pick.outcome)] += 1
        if pick.outcome not in ACCEPTED_OUTCOMES:
            tally.fail(f"Pick answered {pb.PickResponse.Outcome.Name(pick.outcome)}")
            return
        await client.pull_all(pick.response_id)
        await client.final_token(pick.response_id, prompt_tokens=100, completion_tokens=10)
    except grpc.aio.AioRpcError as error:
        tally.error(error, ())
        return
    tally.completed += 1


def _metrics_text(replica: Replica) -> str:
    url = f"http://127.0.0.1:{replica.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


async def _connected(replica: Replica, value: float) -> bool:
    return (await replica.scrape()).value("kinference_redis_connected") == value


async def run(quick: bool, workdir: Path) -> Row:
    row = Row("tenant-flood")
    redis = RedisServer(extra_args=("--maxmemory", "64mb", "--maxmemory-policy", "noeviction"))
    redis.start()
    admin = redis_py.Redis(port=redis.port, decode_responses=True)
    # The 20 kB tenants' refused Picks leave their bodies held until the body TTL: at 2 s they
    # are reclaimed before the replica stops, instead of holding its drain for the grace.
    env = kinference_env(redis_url=redis.url, redis_stale_after_s=1.0, body_ttl_s=2)
    fleet = Fleet(workdir, env)
    fleet.policy.write_text(POLICY)
    try:
        (replica,) = await fleet.start_all("a")
        await _long_tenants(replica.client, row.tally, 200)
        await _flood(replica.client, row.tally, 1_200 if quick else 3_500)
        await asyncio.sleep(1.0)  # one usage publication (every 0.1 s) and a trim
        tenant_keys = list(admin.scan_iter(match="*tenant*", count=1000))
        no_ttl = sum(1 for key in tenant_keys if admin.ttl(key) < 0)
        tracked = int(admin.scard(next(k for k in tenant_keys if k.endswith("tenants"))))
        text = await asyncio.to_thread(_metrics_text, replica)
        labels = {line.split('tenant="')[1].split('"')[0] for line in text.splitlines()
                  if line.startswith("kinference_tenant_tokens_total")}  # fmt: skip
        used_mib = int(admin.info("memory")["used_memory"]) / (1 << 20)
        row.notes.append(f"flood outcomes {dict(row.tally.outcomes)}")
        row.notes.append(
            f"{len(tenant_keys)} tenant keys, {no_ttl} without TTL; tenant set {tracked} "
            f"(cap {MAX_TRACKED_TENANTS}); {len(labels)} tenant label values; /metrics "
            f"{len(text) / 1024:.0f} KiB; Redis {used_mib:.1f} MiB used"
        )
        if no_ttl or tracked > MAX_TRACKED_TENANTS or len(labels) > 101:
            row.problems.append("tenant state not bounded")
        # Far below any use: set just under the current use, the flood's tenant keys expiring
        # (their TTL) made room again and some Picks were rightly answered OK.
        admin.config_set("maxmemory", "1")
        lost = await wait_for(lambda: _connected(replica, 0), 10.0, "connected 0 when full")
        degraded = Tally()
        for _ in range(20):
            await flow(replica.client, chat_body(1024), degraded)
        row.notes.append(
            f"Redis full: connected 0 after {lost:.1f} s, Picks {dict(degraded.outcomes)}"
        )
        if set(degraded.outcomes) != {"DEGRADED"}:
            row.problems.append(f"Picks while Redis refused writes: {dict(degraded.outcomes)}")
        admin.config_set("maxmemory", "0")
        back = await wait_for(lambda: _connected(replica, 1), 10.0, "connected 1 again")
        row.notes.append(f"Redis writable again: connected 1 after {back:.1f} s")
        return row
    finally:
        admin.close()
        await fleet.close()
        redis.stop()

"""A tenant budget under concurrent callers on three replicas (issue 15, item 3).

30 callers (10 per replica) loop over push, Pick and a final report, each request holding
its slot a moment, against a budget of 20 requests' worth of tokens per minute. Before the
fix every concurrent Pick passed the check before any token was charged: 33-46 admitted in
the first 0.1 s. Now each Pick reserves its prompt estimate plus its output limit, so the
cluster admits the budget plus at most one request per replica, also when Redis restarts
empty mid-minute, and a share per replica when Redis is never reachable.
"""

from __future__ import annotations

import asyncio

from kinference.bodies import Body
from kinference.requests import parse_request
from kinference.v1 import picker_pb2 as pb
from loadtest.redis_server import RedisServer, free_port
from tests.api.helpers import chat_body
from tests.conftest import MODEL, RunningPicker

REQUESTS = 20  # the budget, in requests
REPLICAS = 3
CALLERS_PER_REPLICA = 10
OUTPUT_LIMIT = 40
BODY = chat_body(content="tell me about budgets " * 20, max_tokens=OUTPUT_LIMIT)
# What a Pick reserves: the prompt estimate plus max_tokens; each report says exactly that.
RESERVED = parse_request(Body([BODY], reserved=len(BODY))).token_estimate + OUTPUT_LIMIT
LIMIT = REQUESTS * RESERVED
POLICY = f"""
pools:
  - {{namespace: default, name: chat, endpoints: ["10.0.0.1:8000"], models: ["{MODEL}"]}}
tenants:
  - {{tenant: team-a, tokens_per_minute: {LIMIT}}}
"""


class Crowd:
    """Callers looping on every replica; counts the requests admitted."""

    def __init__(self, replicas: list[RunningPicker]) -> None:
        self.admitted = 0
        self.rejected = 0
        self.half_used = asyncio.Event()  # half the budget's requests admitted
        self._stop = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self._caller(replica))
            for replica in replicas
            for _ in range(CALLERS_PER_REPLICA)
        ]

    async def _caller(self, replica: RunningPicker) -> None:
        client = replica.client
        while not self._stop.is_set():
            pushed = await client.push([BODY], declared_length=len(BODY))
            pick = await client.pick(pushed.stream_id, tenant="team-a")
            if pick.outcome not in (pb.PickResponse.OK, pb.PickResponse.DEGRADED):
                assert pick.outcome == pb.PickResponse.POLICY_REJECTED, pick
                self.rejected += 1
                await asyncio.sleep(0.01)
                continue
            self.admitted += 1
            if self.admitted >= REQUESTS // 2:
                self.half_used.set()
            await asyncio.sleep(0.05)  # the request runs
            prompt = RESERVED - OUTPUT_LIMIT
            await client.final_token(
                pick.response_id, prompt_tokens=prompt, completion_tokens=OUTPUT_LIMIT
            )

    async def run_for(self, seconds: float) -> None:
        await asyncio.sleep(seconds)  # a load of this duration, not a wait for a state

    async def stop(self) -> int:
        self._stop.set()
        await asyncio.gather(*self._tasks)
        return self.admitted


async def test_concurrent_callers_get_the_budget_plus_one_per_replica(start_replicas) -> None:
    replicas = await start_replicas(REPLICAS, POLICY)
    crowd = Crowd(replicas)
    await crowd.run_for(1.5)  # ~15 lease rounds (one per ~0.1 s)
    admitted = await crowd.stop()
    print(f"admitted {admitted} of a budget of {REQUESTS} ({crowd.rejected} rejections)")
    assert admitted <= REQUESTS + REPLICAS, admitted
    assert admitted >= REQUESTS // 2  # and the budget is not withheld (a loose bound: CI)


async def test_an_empty_redis_restart_does_not_grant_the_minute_again(
    start_replicas, redis_server: RedisServer
) -> None:
    replicas = await start_replicas(REPLICAS, POLICY)
    crowd = Crowd(replicas)
    async with asyncio.timeout(30):
        await crowd.half_used.wait()
    redis_server.restart()  # empty: the leases hash of the minute is gone
    await crowd.run_for(2.5)
    admitted = await crowd.stop()
    print(f"admitted {admitted} of {REQUESTS} across an empty restart")
    # The replicas re-seed the hash from their own charges: the minute is not granted again
    # (21 admitted when run alone; up to 24 seen under the whole suite's load, a credit per
    # replica on each side of the outage).
    assert admitted <= REQUESTS + 2 * REPLICAS, admitted


async def test_without_redis_each_replica_admits_its_share(start_replicas) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # never reachable
    # Started side by side: each start waits out its bootstrap bound (~2 s) for a Redis
    # that never answers, and one after another they waited three times that.
    started = await asyncio.gather(
        *(start_replicas(1, POLICY, redis_url=url) for _ in range(REPLICAS))
    )
    replicas = [replica for one in started for replica in one]
    crowd = Crowd(replicas)
    await crowd.run_for(1.0)
    admitted = await crowd.stop()
    print(f"admitted {admitted} of {REQUESTS} with Redis never reached")
    # limit / 3 (the expected replica count before any was seen) each: the budget, plus
    # at most one request per replica.
    assert admitted <= REQUESTS + REPLICAS, admitted


async def test_fail_closed_admits_no_budgeted_request_without_redis(start_replicas) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    replicas = await start_replicas(1, POLICY, redis_url=url, tenant_budget_offline="closed")
    crowd = Crowd(replicas)
    await crowd.run_for(0.5)
    assert await crowd.stop() == 0
    assert crowd.rejected > 0


async def test_a_new_tenant_is_not_refused_while_its_first_lease_is_on_the_way(
    start_replicas, redis_server: RedisServer
) -> None:
    """A budget with room for thousands of requests: a new tenant's second request, picked
    while the lease round its first one asked for is held up (Redis stopped a moment), waits
    for that round instead of being refused with "0 leased"; then requests back to back and
    16 at once are all admitted."""
    roomy = POLICY.replace(f"tokens_per_minute: {LIMIT}", f"tokens_per_minute: {LIMIT * 500}")
    replicas = await start_replicas(2, roomy)
    client = replicas[0].client

    async def pick() -> pb.PickResponse:
        pushed = await client.push([BODY], declared_length=len(BODY))
        return await client.pick(pushed.stream_id, tenant="team-a")

    redis_server.pause()
    try:
        first = await pick()  # admitted on the replica's credit; its lease round hangs
        second = asyncio.create_task(pick())
        await asyncio.sleep(0.2)  # the round stays held up this long
    finally:
        redis_server.resume()
    outcomes = [first.outcome, (await second).outcome]
    outcomes += [(await pick()).outcome for _ in range(8)]
    outcomes += [answer.outcome for answer in await asyncio.gather(*[pick() for _ in range(16)])]
    dispatched = (pb.PickResponse.OK, pb.PickResponse.DEGRADED)
    assert all(outcome in dispatched for outcome in outcomes), outcomes

"""Scenario "budget": one tenant budget, concurrent callers on three replicas, Redis faults.

A `"*"` rule gives each named tenant a budget of BUDGET_REQUESTS requests' worth of tokens
per minute. Ten callers per replica loop over push, Pick, a short hold and a final report
that says exactly what the Pick reserved (its prompt estimate plus max_tokens). Three
phases, each with a tenant of its own and well inside one minute:

- steady: Redis up throughout;
- empty restart: Redis SIGKILLed and restarted empty once half the budget is admitted;
- no Redis: three more replicas whose Redis URL nothing listens on.

Target: in each phase at most the budget plus one request per replica is admitted.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from kinference.bodies import Body as HeldBody
from kinference.client import PickerClient
from kinference.requests import parse_request
from kinference.v1 import picker_pb2 as pb
from loadtest.faults.harness import POLICY_YAML, Fleet, kinference_env
from loadtest.faults.load import Tally
from loadtest.faults.report import Row
from loadtest.flows import ACCEPTED_OUTCOMES, MODEL
from loadtest.redis_server import RedisServer, free_port

BUDGET_REQUESTS = 20
REPLICAS = 3
CALLERS_PER_REPLICA = 10
OUTPUT_LIMIT = 40
HOLD_S = 0.05  # seconds a request "runs" between Pick and its report
BODY = json.dumps(
    {
        "model": MODEL,
        "messages": [{"role": "user", "content": "tell me about budgets " * 20}],
        "max_tokens": OUTPUT_LIMIT,
    }
).encode()
RESERVED = parse_request(HeldBody([BODY], reserved=len(BODY))).token_estimate + OUTPUT_LIMIT
LIMIT = BUDGET_REQUESTS * RESERVED
POLICY = POLICY_YAML + f'tenants:\n  - {{tenant: "*", tokens_per_minute: {LIMIT}}}\n'


class Crowd:
    """CALLERS_PER_REPLICA looping callers per client, all for `tenant`."""

    def __init__(self, clients: list[PickerClient], tenant: str, tally: Tally) -> None:
        self.admitted = self.rejected = 0
        self.half = asyncio.Event()
        self._tenant, self._tally = tenant, tally
        self._stop = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self._caller(client))
            for client in clients
            for _ in range(CALLERS_PER_REPLICA)
        ]

    async def _caller(self, client: PickerClient) -> None:
        while not self._stop.is_set():
            self._tally.requests += 1
            pushed = await client.push([BODY], declared_length=len(BODY))
            pick = await client.pick(pushed.stream_id, tenant=self._tenant)
            self._tally.outcomes[pb.PickResponse.Outcome.Name(pick.outcome)] += 1
            if pick.outcome == pb.PickResponse.POLICY_REJECTED:
                self.rejected += 1
                await asyncio.sleep(0.01)
                continue
            if pick.outcome not in ACCEPTED_OUTCOMES:
                self._tally.fail(f"Pick answered {pick.outcome}")
                continue
            self.admitted += 1
            if self.admitted >= BUDGET_REQUESTS // 2:
                self.half.set()
            await asyncio.sleep(HOLD_S)
            await client.final_token(
                pick.response_id,
                prompt_tokens=RESERVED - OUTPUT_LIMIT,
                completion_tokens=OUTPUT_LIMIT,
            )
            self._tally.completed += 1

    async def stop(self) -> int:
        self._stop.set()
        await asyncio.gather(*self._tasks)
        return self.admitted


async def _phase(row: Row, name: str, crowd: Crowd) -> None:
    admitted = await crowd.stop()
    row.notes.append(
        f"{name}: {admitted} admitted for a budget of {BUDGET_REQUESTS} "
        f"({REPLICAS * CALLERS_PER_REPLICA} callers, {crowd.rejected} rejections)"
    )
    if admitted > BUDGET_REQUESTS + REPLICAS:
        row.problems.append(f"{name}: {admitted} admitted, over {BUDGET_REQUESTS} + {REPLICAS}")


async def run(quick: bool, workdir: Path) -> Row:
    row = Row("budget")
    # Over-admission by concurrent Picks shows in the first lease rounds (~0.1 s apart); after
    # an empty restart it could only show once RECOVER_S (2 s) without grants has passed.
    run_s = 1.5 if quick else 10.0
    restart_s = 3.0 if quick else 10.0
    redis = RedisServer().start()
    fleet = Fleet(workdir, kinference_env(redis_url=redis.url))
    fleet.policy.write_text(POLICY)
    (workdir / "offline").mkdir()
    dead_url = f"redis://127.0.0.1:{free_port()}"  # nothing listens there
    offline = Fleet(workdir / "offline", kinference_env(redis_url=dead_url))
    try:
        replicas = await fleet.start_all(*(f"r{n}" for n in range(REPLICAS)))
        clients = [replica.client for replica in replicas]
        crowd = Crowd(clients, "steady", row.tally)
        await asyncio.sleep(run_s)  # the load runs this long
        await _phase(row, "steady", crowd)
        crowd = Crowd(clients, "restart", row.tally)
        async with asyncio.timeout(30):
            await crowd.half.wait()
        redis.restart()
        await asyncio.sleep(restart_s)
        await _phase(row, "empty restart", crowd)
        offline.policy.write_text(POLICY)
        alone = await offline.start_all(*(f"o{n}" for n in range(REPLICAS)))
        crowd = Crowd([replica.client for replica in alone], "offline", row.tally)
        await asyncio.sleep(run_s)
        await _phase(row, "no Redis", crowd)
        return row
    finally:
        await fleet.close()
        await offline.close()
        redis.stop()

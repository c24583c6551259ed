"""Scenario "abandon": 10,000 requests abandoned at random stages, never released.

Callers on one connection walk away (no reset, no Abort) after the push, after Pick,
after the pull, or after the first-token report, chosen at random. Nothing tells the
replica: only its TTLs (body 2 s, request 4 s here) reclaim the bodies and the load. After
them buffered bytes, bodies held and requests in flight must be 0 and RSS back near its
warm baseline. Well-behaved callers run alongside and must not see one failure.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import grpc

from kinference.client import PickerClient
from loadtest.faults.harness import Fleet, kinference_env
from loadtest.faults.load import SteadyLoad, Tally, push, warm_up
from loadtest.faults.report import Row, settle_memory
from loadtest.flows import Body, chat_body

STAGES = ("after-push", "after-pick", "after-pull", "after-first-token")
BODY_TTL_S = 2.0
REQUEST_TTL_S = 4.0
CONCURRENT = 32  # abandoning callers at a time
SIZES = (1 << 10, 4 << 10, 16 << 10, 64 << 10)  # bytes; random per request


async def abandon_one(client: PickerClient, stage: str, body: Body, tally: Tally) -> None:
    tally.requests += 1
    try:
        stream_id = await push(client, body)
        if stage != "after-push":
            pick = await client.pick(stream_id)
            if stage != "after-pick":
                await client.pull_all(pick.response_id)
            if stage == "after-first-token":
                await client.first_token(pick.response_id, ttft_ms=5)
        tally.outcomes[stage] += 1
    except grpc.aio.AioRpcError as error:
        tally.fail(f"{stage}: {error.code().name} {error.details()}")


async def abandon_many(client: PickerClient, count: int, tally: Tally, seed: int = 7) -> None:
    rng = random.Random(seed)
    bodies = [chat_body(size) for size in SIZES]
    plan = [(rng.choice(STAGES), rng.choice(bodies)) for _ in range(count)]
    gate = asyncio.Semaphore(CONCURRENT)

    async def one(stage: str, body: Body) -> None:
        async with gate:
            await abandon_one(client, stage, body, tally)

    await asyncio.gather(*(one(stage, body) for stage, body in plan))


async def run(quick: bool, workdir: Path) -> Row:
    row = Row("abandon")
    fleet = Fleet(workdir, kinference_env(body_ttl_s=BODY_TTL_S, request_ttl_s=REQUEST_TTL_S))
    body = chat_body(4096)
    try:
        replica = await fleet.start("r")
        await warm_up(replica.client, body, 30 if quick else 200)
        baseline = replica.rss_mib()
        load = SteadyLoad([replica.client], body, workers=2)
        abandoned = Tally()
        await abandon_many(replica.client, 1_000 if quick else 10_000, abandoned)
        scrape = await replica.scrape()
        row.notes.append(
            f"right after: {sum(scrape.inflight().values())} in flight, "
            f"{scrape.value('kinference_bodies_held'):.0f} bodies, RSS {replica.rss_mib():.0f} MiB"
        )
        row.tally = await load.stop()
        row.tally.requests += abandoned.requests
        row.tally.failed += abandoned.failed
        row.tally.examples += abandoned.examples
        row.notes.append(f"abandoned by stage {dict(abandoned.outcomes)}")
        await settle_memory(row, [replica], [baseline], BODY_TTL_S + REQUEST_TTL_S + 10)
        return row
    finally:
        await fleet.close()

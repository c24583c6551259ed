"""Scenario "replica": one of three replicas sharing Redis is SIGKILLed mid-request.

Before the kill, replica c holds requests at every stage: picked and never reported
(load the others see), one body half pulled, one half pushed, and its share of the steady
load. After the kill its callers must see UNAVAILABLE (the spec's error for an instance
that went away) and nothing else; the survivors must drop c's load once its heartbeat
expires and keep picking without a failure; their view must equal a fresh replica's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

from loadtest.faults.harness import (
    HELD_WORKERS,
    Fleet,
    Replica,
    held_body,
    kinference_env,
    wait_for,
)
from loadtest.faults.load import SteadyLoad, Tally, hold, push, warm_up
from loadtest.faults.report import Row, settle_memory, views_equal
from loadtest.flows import chat_body
from loadtest.redis_server import RedisServer

HELD_ON_A = 2  # requests kept in flight on a survivor: its load must stay visible
HELD_ON_C = 4  # requests in flight on the replica killed: their load must vanish
ON_A, ON_C = HELD_WORKERS  # the models (each served by one worker of its own) they name
UNAVAILABLE = frozenset({grpc.StatusCode.UNAVAILABLE})
PHASE_S = 30.0  # seconds allowed for each phase (heartbeat expiry is 3 s)


async def _seen(replica: Replica, c_held: int) -> bool:
    """Whether `replica` sees `c_held` of c's held requests, and all of a's."""
    view = (await replica.scrape()).inflight()
    return view.get(HELD_WORKERS[ON_C], 0) == c_held and view.get(HELD_WORKERS[ON_A]) == HELD_ON_A


async def _half_pull(c: Replica, tally: Tally, pulling: asyncio.Event) -> None:
    """A caller of c pulling a 32 MiB body at a crawl (larger than what HTTP/2 windows let
    the client buffer, so c dies while the pull is open). `pulling` is set once its first
    message arrived: the kill must wait for it, or on a loaded machine the 32 MiB push or
    its Pick is still under way when c dies, and fails outside the pull (the flake of
    issue 15: UNAVAILABLE "Stream removed" escaping the scenario)."""
    body = chat_body(32 << 20)
    pick = await c.client.pick(await push(c.client, body))
    tally.requests += 1
    try:
        async for _ in c.client.pull(pick.response_id):
            pulling.set()
            await asyncio.sleep(0.5)  # a crawling consumer
    except grpc.aio.AioRpcError as error:
        tally.error(error, UNAVAILABLE)
    else:
        tally.fail("a pull from the killed replica completed")


async def _half_push(
    c: Replica, tally: Tally, killed: asyncio.Event, pushing: asyncio.Event
) -> None:
    """A caller pushing to c that sends half its body, then the rest once c is dead;
    `pushing` is set once its first chunk was handed to gRPC."""
    chunks = chat_body(2 << 20, chunk_bytes=256 << 10).chunks

    async def body() -> AsyncIterator[bytes]:
        yield chunks[0]
        pushing.set()
        await killed.wait()
        for chunk in chunks[1:]:
            yield chunk

    tally.requests += 1
    try:
        await c.client.push(body(), declared_length=2 << 20)
    except grpc.aio.AioRpcError as error:
        tally.error(error, UNAVAILABLE)
    else:
        tally.fail("a push to the killed replica completed")


async def _both_set(*events: asyncio.Event) -> bool:
    return all(event.is_set() for event in events)


async def run(quick: bool, workdir: Path) -> Row:
    row = Row("replica")
    redis = RedisServer().start()
    fleet = Fleet(workdir, kinference_env(redis_url=redis.url, body_ttl_s=2))
    body = chat_body(4096)
    background: list[asyncio.Task[Any]] = []  # ended here if the scenario fails midway
    try:
        a, b, c = await fleet.start_all("a", "b", "c")
        for replica in (a, b, c):
            await warm_up(replica.client, body, 30 if quick else 200)
        baselines = [a.rss_mib(), b.rss_mib()]
        held = [await hold(a.client, held_body(ON_A)) for _ in range(HELD_ON_A)]
        for _ in range(HELD_ON_C):
            await hold(c.client, held_body(ON_C))
        await wait_for(lambda: _seen(b, HELD_ON_C), PHASE_S, "b seeing c's held requests")
        killed = asyncio.Event()
        load = SteadyLoad(
            [a.client, b.client, c.client],
            body,
            spec_codes=lambda client: UNAVAILABLE if killed.is_set() else (),
        )
        pulling, pushing = asyncio.Event(), asyncio.Event()
        pinned = [
            asyncio.create_task(_half_pull(c, load.tally, pulling)),
            asyncio.create_task(_half_push(c, load.tally, killed, pushing)),
        ]
        background += pinned
        await wait_for(lambda: load.picks_beyond(30 if quick else 1000), PHASE_S, "load")
        await wait_for(lambda: _both_set(pulling, pushing), PHASE_S, "the half pull and push")
        killed.set()
        c.kill()
        start = time.monotonic()
        # Started now, it bootstraps while c's heartbeat is still expiring: its view must
        # converge to the survivors' as theirs do.
        fresh = asyncio.create_task(fleet.start("fresh"))
        background.append(fresh)

        async def c_gone() -> bool:
            return await _seen(a, 0) and await _seen(b, 0)

        await wait_for(c_gone, PHASE_S, "c's load gone from the survivors' views")
        row.notes.append(
            f"c's load gone from the survivors' views {time.monotonic() - start:.1f} s after kill"
        )
        await asyncio.gather(*pinned)
        done = load.tally.completed
        await wait_for(
            lambda: load.picks_beyond(done + (30 if quick else 1000)), PHASE_S, "picks after"
        )
        row.tally = await load.stop()
        row.tally.requests += HELD_ON_A + HELD_ON_C
        await views_equal(row, [a, b], await fresh)
        if (await a.scrape()).inflight() != {HELD_WORKERS[ON_A]: HELD_ON_A}:
            row.problems.append(f"a's view is not just its {HELD_ON_A} held requests")
        for pick in held:
            await a.client.final_token(pick.response_id)
        await settle_memory(row, [a, b], baselines, 10.0)
        return row
    finally:
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await fleet.close()
        redis.stop()

"""Scenario "redis": Redis killed, paused (SIGSTOP) and restarted under a steady load.

Two replicas (real `kinference serve` subprocesses) share one redis-server while callers
loop over the whole flow on both. A few requests picked on replica a stay in flight all
along, so there is shared load to lose and to recover. For each fault the scenario waits
until both replicas answer DEGRADED (they noticed), heals Redis, and waits until both are
connected with a fresh view and picks go on. Then a fresh replica is started and every
replica's in-flight load per worker must equal the fresh one's (the held requests).
In-process versions of these faults: tests/cluster/test_replication.py.
"""

from __future__ import annotations

import time
from pathlib import Path

from loadtest.faults.harness import (
    HELD_WORKERS,
    Fleet,
    Replica,
    held_body,
    kinference_env,
    wait_for,
)
from loadtest.faults.load import SteadyLoad, hold, warm_up
from loadtest.faults.report import Row, settle_memory, views_equal
from loadtest.flows import chat_body
from loadtest.redis_server import RedisServer

HELD = 3  # requests picked on replica a and kept in flight through every fault
HELD_MODEL = "held-1"  # served by a worker of its own
STALE_AFTER_S = 0.5  # KINFERENCE_REDIS_STALE_AFTER_S: DEGRADED soon after Redis goes away
FAULT_S = 30.0  # seconds allowed for each phase of a fault (noticed, healed)


async def _caught_up(replicas: list[Replica]) -> bool:
    for replica in replicas:
        scrape = await replica.scrape()
        connected = scrape.value("kinference_redis_connected") == 1
        if not connected or scrape.value("kinference_cluster_view_age_seconds") > STALE_AFTER_S:
            return False
    return True


async def _fault(
    name: str, redis: RedisServer, load: SteadyLoad, replicas: list[Replica], during: int
) -> str:
    """Apply one fault under load, keep it while `during` more requests complete, heal it;
    returns a note with the phases' durations."""
    degraded = load.tally.outcomes["DEGRADED"]
    start = time.monotonic()
    if name == "kill":
        redis.kill()
    elif name == "pause":
        redis.pause()
    else:  # restart: killed and back at once, empty
        redis.restart()

    async def noticed() -> bool:
        return load.tally.outcomes["DEGRADED"] > degraded

    if name != "restart":
        await wait_for(noticed, FAULT_S, f"DEGRADED picks after Redis {name}")
        done = load.tally.completed
        await wait_for(lambda: load.picks_beyond(done + during), FAULT_S, f"picks during {name}")
        if name == "kill":
            redis.start()
        else:
            redis.resume()
    healed = time.monotonic()
    await wait_for(lambda: _caught_up(replicas), FAULT_S, f"replicas caught up after {name}")
    done = load.tally.completed
    await wait_for(lambda: load.picks_beyond(done + 20), FAULT_S, f"picks after {name}")
    return f"{name}: down {healed - start:.1f} s, caught up {time.monotonic() - healed:.1f} s"


async def run(quick: bool, workdir: Path) -> Row:
    row = Row("redis")
    redis = RedisServer().start()
    env = kinference_env(redis_url=redis.url, redis_stale_after_s=STALE_AFTER_S, body_ttl_s=2)
    fleet = Fleet(workdir, env)
    body = chat_body(4096)
    try:
        a, b = await fleet.start_all("a", "b")
        for replica in (a, b):
            await warm_up(replica.client, body, 30 if quick else 200)
        baselines = [a.rss_mib(), b.rss_mib()]
        held = [await hold(a.client, held_body(HELD_MODEL)) for _ in range(HELD)]
        load = SteadyLoad([a.client, b.client], body, workers=2)
        rounds = ("kill", "pause", "restart") if quick else ("kill", "pause", "restart") * 3
        for fault in rounds:
            row.notes.append(await _fault(fault, redis, load, [a, b], 10 if quick else 300))
        row.tally = await load.stop()
        row.tally.requests += HELD
        fresh = await fleet.start("fresh")
        await views_equal(row, [a, b], fresh)
        if (await fresh.scrape()).inflight() != {HELD_WORKERS[HELD_MODEL]: HELD}:
            row.problems.append(f"the fresh replica does not see just the {HELD} held requests")
        for pick in held:
            await a.client.final_token(pick.response_id)
        await settle_memory(row, [a, b, fresh], [*baselines, fresh.rss_mib()], 10.0)
        row.notes.append(f"outcomes {dict(row.tally.outcomes)}")
        return row
    finally:
        await fleet.close()
        redis.stop()

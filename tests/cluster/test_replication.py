"""Three replicas sharing one real redis-server: load, prefix affinity, recovery."""

from __future__ import annotations

import asyncio
import json

import redis

from kinference.cluster import codec
from kinference.cluster.loads import load_counts
from kinference.v1 import picker_pb2 as pb
from loadtest.redis_server import RedisServer
from tests.api.helpers import chat_body, pick_ok, push_and_pick, wait_until
from tests.conftest import MODEL, RunningPicker

# Seconds without a read before a replica says DEGRADED: short so that the fault tests run
# quickly, yet several XREAD blocks (100 ms) long so that a busy CI machine's scheduling
# stalls do not turn a healthy replica's Pick DEGRADED.
STALE_AFTER_S = 1.0
# Seconds allowed for a fault's effect or a recovery to show: a deadline, not a target (a
# loaded 2-core machine delays the replicas' reconnect and catch-up by seconds).
FAULT_DEADLINE_S = 30.0
POOL = "default/chat"  # the pool of CLUSTER_POLICY, and its shard's events stream
POOL_STREAM = "{kinference:default/chat}:events"
ENDPOINTS = ("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000")


def load(replica: RunningPicker) -> dict[str, int]:
    return {e: replica.app.inflight.load(e) for e in ENDPOINTS}


def total(replica: RunningPicker) -> int:
    return sum(load(replica).values())


def flushed(redis_server: RedisServer, replica: RunningPicker) -> int | None:
    """Requests in flight as Redis holds them for `replica` in the pool's shard, once its
    last flush is whole there (a flush writes the load hash, then its entry, in one round
    trip; None until the hash's flush has its entry in the stream)."""
    cluster = replica.app.cluster
    assert cluster is not None
    key = cluster.shard(POOL).keys.load(cluster.instance)
    with redis.Redis(port=redis_server.port, password=redis_server.password) as client:
        counts, seq = load_counts(client.hgetall(key))
        newest = [codec.decode(i, f) for i, f in client.xrevrange(POOL_STREAM, count=16)]
    ours = [entry.seq for entry in newest if entry and entry.instance == cluster.instance]
    whole = seq is not None and seq in ours
    return sum(counts.values()) if whole else None


def long_prompt(topic: str, turn: int = 0) -> bytes:
    system = f"You are an assistant for {topic}. " + "Follow the house rules carefully. " * 60
    messages = [{"role": "system", "content": system}]
    for n in range(turn + 1):
        messages.append({"role": "user", "content": f"question {n} about {topic}"})
    return json.dumps({"model": MODEL, "messages": messages}).encode()


async def test_load_placed_on_one_replica_is_seen_and_avoided_by_the_others(
    start_replicas,
) -> None:
    a, b, c = await start_replicas(3)
    picks = [await pick_ok(a, chat_body(content=f"hi {n}")) for n in range(6)]
    await wait_until(lambda: total(b) == 6 and total(c) == 6, what="load on b and c")
    assert load(b) == load(a) == load(c)
    # B's own picks go to the workers A left least loaded.
    least = min(load(b).values())
    chosen = await pick_ok(b, chat_body(content="from b"))
    assert load(b)[chosen.local.endpoint] == least + 1
    for pick in picks:
        await a.client.final_token(pick.response_id, prompt_tokens=1, completion_tokens=1)
    await wait_until(lambda: total(c) == 1, what="releases seen by c")


def _endpoint(pick: pb.PickResponse) -> str:
    return pick.local.endpoint


async def test_a_prompt_picked_on_one_replica_attracts_the_same_worker_on_every_replica(
    start_replicas,
) -> None:
    replicas = await start_replicas(3)
    first = await pick_ok(replicas[0], long_prompt("tax law"))
    worker = _endpoint(first)
    await replicas[0].client.final_token(first.response_id, prompt_tokens=10)
    # Busy the chosen worker a little less than the hot-spot threshold on the others'
    # view: affinity, not load, decides.
    await wait_until(lambda: all(len(r.app.router.prefix) > 0 for r in replicas[1:]))
    for turn, replica in enumerate(replicas[1:], start=1):
        pick = await pick_ok(replica, long_prompt("tax law", turn))
        assert _endpoint(pick) == worker
        await replica.client.final_token(pick.response_id, prompt_tokens=10)


async def test_a_stopped_replica_s_load_vanishes_from_the_others(start_replicas) -> None:
    a, b = await start_replicas(2)
    for n in range(4):
        await pick_ok(a, chat_body(content=f"q{n}"))
    await wait_until(lambda: total(b) == 4)
    cluster = a.app.cluster
    assert cluster is not None
    await cluster.crash()  # no goodbye: the heartbeat must expire
    await wait_until(lambda: total(b) == 0, within_s=6.0, what="dead replica's load gone")


async def test_a_new_replica_bootstraps_load_and_prefixes(
    start_replicas, redis_server: RedisServer
) -> None:
    (a,) = await start_replicas(1)
    first = await pick_ok(a, long_prompt("astronomy"))
    for n in range(3):
        await pick_ok(a, chat_body(content=f"q{n}"))
    await wait_until(lambda: flushed(redis_server, a) == 4, what="a's picks in Redis")
    (b,) = await start_replicas(1)
    assert b.app.cluster is not None and b.app.cluster.bootstrapped
    assert load(b) == load(a)
    pick = await pick_ok(b, long_prompt("astronomy", 1))
    assert _endpoint(pick) == _endpoint(first)


async def test_a_trimmed_stream_is_recovered_from_the_load_hashes(
    start_replicas, redis_server: RedisServer
) -> None:
    a, b = await start_replicas(2)
    assert a.app.cluster is not None and b.app.cluster is not None
    # b must know a before it stops reading: a replica it has never heard of would be read
    # back from its load hash by the membership loop (another correct recovery, which
    # would leave no gap for this test to see).
    shard = b.app.cluster.shard(POOL)
    instance = a.app.cluster.instance
    await wait_until(lambda: instance in shard.view.seq, what="b applied an entry of a")
    await b.app.cluster.suspend("read")
    picks = [await pick_ok(a, chat_body(content=f"q{n}")) for n in range(5)]
    for pick in picks[:2]:
        await a.client.final_token(pick.response_id)

    def published() -> bool:
        """The flush with a's picks and reports is whole in Redis: its load hash counts 3
        in flight and the newest entry is that flush's. (a's outbox and sequence number
        are not enough: a flush taken from the outbox may still be on its way.)"""
        return flushed(redis_server, a) == 3

    await wait_until(published, what="a's batches in the stream")
    redis_server.cli("XTRIM", POOL_STREAM, "MAXLEN", "0")
    await pick_ok(a, chat_body(content="after the trim"))
    reader = shard.reader
    reader.bootstrapped = False  # set again only if b bootstraps (after a read error)
    b.app.cluster.resume("read")
    await wait_until(lambda: total(b) == 4, what="b re-reads a's load after the gap")
    assert load(b) == load(a)
    # b re-read a's load hash (the resync), unless a loaded machine sent it another way: a
    # snapshot entry (a's publisher republishes its whole load after any failed write) or
    # a bootstrap (b's read failed), both of which replace a's load too.
    entries = [codec.decode(i, f) for i, f in await a.app.cluster.redis.xrange(POOL_STREAM)]
    snapshot = any(e is not None and e.instance == instance and e.load is not None for e in entries)
    assert reader.resyncs >= 1 or snapshot or reader.bootstrapped


async def test_redis_killed_and_restarted_under_load(
    start_replicas, redis_server: RedisServer
) -> None:
    a, b = await start_replicas(2, redis_stale_after_s=STALE_AFTER_S)
    held = [await pick_ok(a, chat_body(content=f"held {n}")) for n in range(3)]
    await wait_until(lambda: total(b) == 3, within_s=FAULT_DEADLINE_S)
    redis_server.kill()
    outcomes = []
    for n in range(20):
        pick = await push_and_pick(b, chat_body(content=f"during {n}"))
        outcomes.append(pick.outcome)
        if pick.response_id:
            await b.client.final_token(pick.response_id)
    assert set(outcomes) <= {pb.PickResponse.OK, pb.PickResponse.DEGRADED}
    await wait_until(
        lambda: b.app.cluster is not None and b.app.cluster.gap() is not None,
        within_s=FAULT_DEADLINE_S,
    )
    degraded = await push_and_pick(b, chat_body(content="stale view"))
    assert degraded.outcome == pb.PickResponse.DEGRADED
    assert "Redis" in degraded.reason
    await b.client.final_token(degraded.response_id)
    redis_server.start()  # empty: everything shared was lost
    await wait_until(
        lambda: all(r.app.cluster is not None and r.app.cluster.gap() is None for r in (a, b)),
        within_s=FAULT_DEADLINE_S,
        what="both replicas caught up",
    )
    await wait_until(
        lambda: load(b) == load(a) and total(b) == 3,
        within_s=FAULT_DEADLINE_S,
        what="b sees a's load again",
    )
    ok = await pick_ok(b, chat_body(content="after"))
    assert ok.outcome == pb.PickResponse.OK
    for pick in held:
        await a.client.final_token(pick.response_id)
    await wait_until(lambda: total(b) == 1, within_s=FAULT_DEADLINE_S)


class SteadyLoad:
    """Picks in a loop on every replica until stopped; counts outcomes and failures."""

    def __init__(self, replicas: list[RunningPicker]) -> None:
        self.replicas = replicas
        self.outcomes: dict[int, int] = {}
        self.failures: list[BaseException] = []
        self._stop = asyncio.Event()
        self._tasks = [asyncio.create_task(self._run(r, n)) for n, r in enumerate(replicas)]

    async def _run(self, replica: RunningPicker, n: int) -> None:
        count = 0
        while not self._stop.is_set():
            count += 1
            try:
                pick = await push_and_pick(replica, chat_body(content=f"load {n} {count}"))
                self.outcomes[pick.outcome] = self.outcomes.get(pick.outcome, 0) + 1
                if pick.response_id:
                    await replica.client.final_token(pick.response_id)
            except Exception as exc:  # any failed Pick fails the test
                self.failures.append(exc)

    def picks(self) -> int:
        return sum(self.outcomes.values())

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)


async def test_picks_never_fail_while_redis_dies_pauses_and_returns(
    start_replicas, redis_server: RedisServer
) -> None:
    a, b, c = await start_replicas(3, redis_stale_after_s=STALE_AFTER_S)
    held = await pick_ok(a, chat_body(content="held"))
    load_runner = SteadyLoad([a, b, c])
    for fault in ("kill", "pause"):
        before = load_runner.picks()
        if fault == "kill":
            redis_server.kill()
        else:
            redis_server.pause()
        await wait_until(
            lambda wanted=before + 30: load_runner.picks() > wanted, what="picks during the fault"
        )
        await wait_until(lambda: all(r.app.cluster.gap() is not None for r in (a, b, c)))
        if fault == "kill":
            redis_server.start()
        else:
            redis_server.resume()
        await wait_until(lambda: all(r.app.cluster.gap() is None for r in (a, b, c)), within_s=10.0)
    await load_runner.stop()
    assert not load_runner.failures, load_runner.failures[:3]
    assert set(load_runner.outcomes) <= {pb.PickResponse.OK, pb.PickResponse.DEGRADED}
    assert load_runner.outcomes.get(pb.PickResponse.DEGRADED, 0) > 0
    # Caught up: every replica sees exactly the one request still in flight.
    await wait_until(
        lambda: all(total(r) == 1 for r in (a, b, c)),
        what=f"full catch-up ({[load(r) for r in (a, b, c)]})",
    )
    await a.client.final_token(held.response_id)
    await wait_until(lambda: all(total(r) == 0 for r in (a, b, c)))

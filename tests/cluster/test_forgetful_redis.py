"""A Redis that forgets under the replicas: FLUSHALL, a stream deleted and recreated with
lower ids. Every replica must come back to the same load, with Picks never failing."""

from __future__ import annotations

import time

from kinference.v1 import picker_pb2 as pb
from loadtest.redis_server import RedisServer
from tests.api.helpers import chat_body, pick_ok, wait_until
from tests.cluster.test_replication import POOL, POOL_STREAM, flushed, load, total

DEADLINE_S = 10.0


async def test_flushall_under_held_requests_is_refilled(
    start_replicas, redis_server: RedisServer
) -> None:
    a, b = await start_replicas(2)
    held = [await pick_ok(a, chat_body(content=f"held {n}")) for n in range(3)]
    await wait_until(lambda: total(b) == 3, DEADLINE_S, "b sees a's load")
    redis_server.cli("FLUSHALL")
    await wait_until(lambda: flushed(redis_server, a) == 3, DEADLINE_S, "a's load refilled")
    more = await pick_ok(a, chat_body(content="after"))
    await wait_until(lambda: load(b) == load(a) and total(b) == 4, DEADLINE_S, "b caught up")
    for pick in [*held, more]:
        await a.client.final_token(pick.response_id)
    await wait_until(lambda: total(b) == 0, DEADLINE_S, "releases seen")
    after = await pick_ok(b, chat_body(content="b after"))
    assert after.outcome == pb.PickResponse.OK


async def test_a_stream_recreated_with_lower_ids_is_followed(
    start_replicas, redis_server: RedisServer
) -> None:
    """A reader's last id beyond the stream's newest (the stream deleted and recreated by a
    server whose clock is behind the ids it had: a failover, a restore) read nothing new."""
    a, b = await start_replicas(2)
    future = f"{int(time.time() * 1000) + 600_000}-0"  # ten minutes ahead
    redis_server.cli("XADD", POOL_STREAM, future, "i", "someone", "s", "1", "e", "[]")
    await wait_until(
        lambda: b.app.cluster.shard(POOL).reader.last_id == future, DEADLINE_S, "b read it"
    )
    redis_server.cli("DEL", POOL_STREAM)
    picks = [await pick_ok(a, chat_body(content=f"q{n}")) for n in range(3)]
    await wait_until(lambda: total(b) == 3, DEADLINE_S, "b sees a's picks")
    for pick in picks:
        await a.client.final_token(pick.response_id)

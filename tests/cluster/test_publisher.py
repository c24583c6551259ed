"""A replica's flushes keep its load hash whole, even across an empty Redis restart."""

from __future__ import annotations

from kinference.cluster.connection import connect
from kinference.cluster.keys import Keys
from kinference.cluster.loads import SEQ_FIELD
from kinference.cluster.outbox import Outbox
from loadtest.redis_server import RedisServer
from tests.cluster.wiring import shards_of

HELD = "10.0.9.1:8000"  # requests in flight throughout, never touched again
BUSY = "10.0.9.2:8000"  # steady traffic


async def test_a_delta_after_redis_lost_the_hash_is_followed_by_a_whole_snapshot(
    redis_server: RedisServer,
) -> None:
    client = connect(redis_server.url)
    keys, outbox = Keys(), Outbox()
    own = {HELD: 3, BUSY: 1}
    shards = shards_of(client, "a", outbox, lambda: dict(own), keys=keys, maxlen=1000)
    publisher = shards.top.publisher
    try:
        await shards.flush()  # the first flush is a snapshot
        loaded = await client.hgetall(keys.load("a"))
        assert {k: v for k, v in loaded.items() if k != SEQ_FIELD.encode()} == {
            HELD.encode(): b"3",
            BUSY.encode(): b"1",
        }

        await client.flushall()  # Redis restarted empty, before any heartbeat noticed
        own[BUSY] = 2
        outbox.picked(BUSY, "m", ())
        await shards.flush()  # a delta: it recreates the hash with BUSY only...
        assert publisher.snapshot_needed  # ...and notices the hash was gone
        await shards.flush()
        loaded = await client.hgetall(keys.load("a"))
        assert loaded[HELD.encode()] == b"3"
        assert loaded[BUSY.encode()] == b"2"
        assert not publisher.snapshot_needed
    finally:
        await client.aclose()

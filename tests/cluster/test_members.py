"""Liveness from the `alive` sorted set (Redis's clock), with the heartbeat keys still
honoured for replicas of a release before the set."""

from __future__ import annotations

from kinference.cluster.connection import connect
from kinference.cluster.keys import HEARTBEAT_TTL_MS, Keys
from kinference.cluster.loads import SEQ_FIELD
from kinference.cluster.members import Membership
from kinference.cluster.outbox import Outbox
from loadtest.redis_server import RedisServer
from tests.cluster.wiring import shards_of

ENDPOINT = "10.0.0.1:8000"


async def test_stamped_old_style_and_stale_replicas(redis_server: RedisServer) -> None:
    client = connect(redis_server.url)
    keys = Keys()
    shards = shards_of(client, "me", Outbox(), keys=keys, maxlen=1000)
    me = Membership(client, keys, "me", lambda: list(shards))
    new = Membership(client, keys, "new", lambda: list(shards))
    try:
        await me.beat()
        await new.beat()
        await client.delete(keys.heartbeat("new"))  # the stamp alone proves it alive
        await client.set(keys.heartbeat("old"), b"1", px=HEARTBEAT_TTL_MS)  # key, no stamp
        await client.sadd(keys.instances(), "old", "stale")
        now_ms = int(await client.eval("return redis.call('TIME')[1]", 0)) * 1000
        await client.zadd(keys.alive(), {"stale": now_ms - 2 * HEARTBEAT_TTL_MS})
        await client.hset(keys.load("stale"), mapping={ENDPOINT: 2, SEQ_FIELD: 1})
        await me.check()
        assert me.replicas == 3  # me, new, old
        assert {m.decode() for m in await client.smembers(keys.instances())} == {"me", "new", "old"}
        await new.leave()
        assert await client.zscore(keys.alive(), "new") is None
        await me.check()
        assert me.replicas == 2
    finally:
        await client.aclose()

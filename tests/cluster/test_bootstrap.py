"""What a replica starting late loads from Redis: engine readings and latency statistics."""

from __future__ import annotations

import math
import time

from kinference.cluster.connection import connect
from kinference.cluster.keys import Keys
from kinference.cluster.outbox import Outbox
from kinference.cluster.replication import Publisher, Reader
from kinference.cluster.stats import StatsBuffer
from kinference.cluster.view import ClusterView
from kinference.routing import PrefixIndex, WorkerTable
from loadtest.redis_server import RedisServer

ENDPOINT = "10.0.0.1:8000"


async def test_a_late_replica_loads_readings_statistics_and_prefixes(
    redis_server: RedisServer,
) -> None:
    client = connect(redis_server.url)
    keys = Keys()
    outbox = Outbox()
    stats = StatsBuffer(client, keys, "early")
    publisher = Publisher(
        client, keys, "early", outbox, own_load=lambda: {ENDPOINT: 1}, stats=stats, maxlen=1000
    )
    reading = {"at": time.time(), "ready": True, "read": True, "waiting": 4, "running": 2}
    outbox.engine(ENDPOINT, reading | {"kv_usage": 0.5, "adapters": ["sql-lora"]})
    outbox.picked(ENDPOINT, "m", (11, 22, 33))
    outbox.first_token(ENDPOINT, "m", 120.0)
    outbox.itl(ENDPOINT, "m", [0, 0, 4, *[0] * 12])
    await publisher.flush()
    await stats.flush()
    await client.set(keys.heartbeat("early"), b"1")  # alive, as its heartbeat would say
    await client.sadd(keys.instances(), "early")

    table, prefix = WorkerTable(), PrefixIndex(1000)
    reader = Reader(client, keys, "late", ClusterView(table, prefix))
    await reader.bootstrap()
    slot = table.slot(ENDPOINT)
    assert table.inflight[slot] == 1  # from the early replica's load hash
    assert (table.waiting[slot], table.kv_usage[slot]) == (4, 0.5)  # from the engines hash
    assert table.lora_mask("sql-lora") is not None
    assert math.isclose(table.ttft_ms("m")[slot], 120.0)  # from the statistics hash
    assert math.isclose(table.itl_ms("m")[slot], 12.5)  # bucket 2's representative gap
    assert prefix.match((11, 22, 33)) == {slot: 3}  # replayed from the stream's tail
    await client.aclose()

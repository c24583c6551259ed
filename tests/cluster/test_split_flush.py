"""A delta flush's load hash changes at once: a reader never finds its new sequence number
with its old counts (h199).

A flush wrote the hash's seq and its counts in two commands of one pipeline. Redis runs a
client's pipelined commands as they arrive: a pipeline split in two TCP segments (a pool
with many endpoints, a real network) let another client's HGETALL in between, and a
replica re-reading that hash then (a resync, a bootstrap, the membership check) took the
new seq with the old counts and skipped the entry's deltas: a count wrong until that
endpoint changed again. A proxy here splits the flush after its first command and reads
the hash in between.
"""

from __future__ import annotations

import asyncio

from kinference.cluster.connection import RedisClient, connect
from kinference.cluster.loads import load_reply
from kinference.cluster.outbox import Outbox
from loadtest.redis_server import RedisServer
from tests.cluster.proxy import SplittingProxy
from tests.cluster.wiring import shards_of

ENDPOINT = "10.0.0.1:8000"


async def test_a_reader_between_a_flush_s_commands_finds_its_seq_and_counts_together(
    redis_server: RedisServer, client: RedisClient
) -> None:
    proxy = SplittingProxy(redis_server.port)
    writer = connect(f"redis://127.0.0.1:{await proxy.start()}/0")
    outbox, own = Outbox(), {ENDPOINT: 0}
    shards = shards_of(writer, "a", outbox, lambda: own)
    key = shards.top.keys.load("a")
    try:
        outbox.released(ENDPOINT)
        await shards.flush()  # the first flush: a snapshot (one script call)
        assert load_reply(await client.hgetall(key)) == ({ENDPOINT: 0}, 1)
        own[ENDPOINT] = 1
        outbox.picked(ENDPOINT, "m", [1, 2, 3])
        proxy.armed = True
        flush = asyncio.create_task(shards.flush())  # a delta flush
        await asyncio.wait_for(proxy.split.wait(), 10.0)
        counts, seq = load_reply(await client.hgetall(key))
        proxy.go.set()
        await flush
        assert (seq, counts.get(ENDPOINT, 0)) in ((1, 0), (2, 1))
        assert load_reply(await client.hgetall(key)) == ({ENDPOINT: 1}, 2)
    finally:
        proxy.go.set()
        await writer.aclose()
        await proxy.close()

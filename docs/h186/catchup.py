"""How big is the first flush after a long refusal, and what does it cost?

A replica's outbox filled while Redis refused writes (DEFAULT_LIMIT events: picks of BLOCKS
prefix blocks each, and the events a finished request adds), then one flush as the publisher
sends it, and one read of it by another replica's Reader.

    PYTHONPATH=. python docs/h186/catchup.py [EVENTS] [BLOCKS]
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
import tracemalloc

from kinference.cluster.connection import connect
from kinference.cluster.keys import Keys
from kinference.cluster.outbox import DEFAULT_LIMIT, Outbox
from kinference.cluster.replication import Reader
from kinference.cluster.stats import StatsBuffer
from kinference.routing import PrefixIndex, WorkerTable
from loadtest.redis_server import RedisServer
from tests.cluster.wiring import shards_of, view_of

ENDPOINTS = [f"10.0.0.{n}:8000" for n in range(1, 5)]


def fill(outbox: Outbox, events: int, blocks: int) -> int:
    rng, picks = random.Random(1), 0
    while len(outbox) < events and not outbox.dropped:
        endpoint = rng.choice(ENDPOINTS)
        outbox.picked(endpoint, "m", tuple(rng.getrandbits(64) for _ in range(blocks)))
        outbox.first_token(endpoint, "m", 120.0)
        outbox.itl(endpoint, "m", [0, 0, 4, *[0] * 12])
        outbox.served(endpoint, "m", 2000.0, 115.0, 1800.0)
        outbox.text(endpoint, "m", 4000.0, 1000.0)
        outbox.busy(endpoint, "m", 3.0, 10.0)
        outbox.released(endpoint)
        picks += 1
    return picks


class Lag:
    """The loop's longest wait between two 1 ms ticks (what a Pick would have waited)."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._task = asyncio.create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            self.worst = max(self.worst, time.perf_counter() - before - 0.001)

    def take(self) -> float:
        worst, self.worst = self.worst, 0.0
        return worst


async def main(events: int, blocks: int) -> None:
    server = RedisServer().start()
    lag = Lag()
    try:
        redis = connect(server.url)
        keys = Keys().for_pool("default/chat")  # the pool's shard: its own stream
        outbox = Outbox()
        tracemalloc.start()
        picks = fill(outbox, events, blocks)
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        print(
            f"outbox: {len(outbox)} events ({getattr(outbox, 'dropped', 0)} dropped), {picks} picks of {blocks} blocks, "
            f"{held / 1e6:.1f} MB held"
        )
        # The production flush (h193 removed Publisher.flush): the replica's shards, the
        # pool's taking its endpoints' events.
        stats = StatsBuffer(redis, Keys(), "a")
        shards = shards_of(redis, "a", outbox, keys=Keys(), stats=stats, maxlen=20000)
        shards.set_pools({"default/chat": ENDPOINTS})
        events, dirty, _ = outbox.take()
        outbox.requeue(events, dirty)  # as after a first refused flush: hashes as bytes
        await redis.config_set("maxmemory-policy", "noeviction")
        await redis.config_set("maxmemory", "1")
        for _ in range(3):  # a refusing Redis (OOM): what each retry costs the loop
            started = time.perf_counter()
            lag.take()
            try:
                await shards.flush()
            except Exception as error:  # noqa: BLE001
                took = time.perf_counter() - started
                await asyncio.sleep(0.01)
                print(
                    f"refused flush: {took:.3f} s, loop held {lag.take():.3f} s, "
                    f"{len(outbox)} events kept ({type(error).__name__})"
                )
        await redis.config_set("maxmemory", "0")
        started, worst, flushes = time.perf_counter(), 0.0, 0
        lag.take()
        try:
            while len(outbox) or shards.owe_snapshot():  # as the publish loop does
                await shards.flush()
                flushes += 1
                await asyncio.sleep(0)
                worst = max(worst, lag.take())
        except Exception as error:  # noqa: BLE001
            print(f"flush failed after {time.perf_counter() - started:.3f} s: {error!r}")
            return
        took = time.perf_counter() - started
        await asyncio.sleep(0.01)
        print(
            f"catch-up: {flushes} flushes in {took:.3f} s, loop held {max(worst, lag.take()):.3f} s at most"
        )
        size = await redis.memory_usage(keys.events())
        print(f"stream: {await redis.xlen(keys.events())} entries, {size / 1e6:.1f} MB in Redis")
        reader = Reader(
            connect(server.url, block_s=0.5),
            keys,
            "b",
            view_of(WorkerTable(), PrefixIndex(100_000)),
        )
        reader.bootstrap_needed = False
        newest = (await redis.xrevrange(keys.events(), count=1))[0][0].decode()
        started, worst = time.perf_counter(), 0.0
        lag.take()
        while reader.last_id != newest:
            await reader.read()
            worst = max(worst, lag.take())
        took = time.perf_counter() - started
        await asyncio.sleep(0.01)
        print(
            f"read and applied by another replica: {took:.3f} s, "
            f"loop held {max(worst, lag.take()):.3f} s at most"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    asyncio.run(
        main(
            int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_LIMIT,
            int(sys.argv[2]) if len(sys.argv) > 2 else 64,
        )
    )

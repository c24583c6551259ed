"""A feed stopped while its replay is under way (the endpoint left the pool, or its address
changed) leaves nothing behind: what the replay fetches is not applied to the worker's
slot, which `PreciseEvents` has just forgotten (and which another endpoint may take)."""

from __future__ import annotations

import asyncio

import zmq
import zmq.asyncio

from kinference.kvcache.pool import PoolCaches
from kinference.kvevents.subscriber import EventSubscriber, Feed
from kinference.kvevents.trust import WorkerTrust
from tests.kvevents import vllm_format as vllm


def _batch(n: int) -> bytes:
    return vllm.encode([vllm.stored([n + 1], list(range(4 * n, 4 * n + 4)))])


async def test_a_replay_under_way_is_dropped_with_its_feed() -> None:
    context = zmq.asyncio.Context()
    router = context.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    subscriber = EventSubscriber(lambda: 0.0)
    pool = PoolCaches("p", 4)
    trust = pool.trust[0] = WorkerTrust(5.0, 10.0, can_replay=True)
    feed = Feed(pool, 0, "e0", "tcp://127.0.0.1:9", f"tcp://127.0.0.1:{port}", b"", trust)
    try:
        subscriber.add(feed)
        subscriber.receive(feed, [b"", vllm.seq_bytes(0), _batch(0)])
        before = asyncio.all_tasks()
        subscriber.receive(feed, [b"", vllm.seq_bytes(2), _batch(2)])  # 1 missed: replay
        (replay,) = asyncio.all_tasks() - before
        client, _, start = await asyncio.wait_for(router.recv_multipart(), 5)
        assert int.from_bytes(start, "big") == 1
        subscriber.remove("p", 0)  # as `PreciseEvents._stop` does
        pool.trust.pop(0)
        pool.forget(0)
        await router.send_multipart([client, b"", vllm.seq_bytes(1), _batch(1)])
        await router.send_multipart([client, b"", vllm.seq_bytes(-1), b""])
        await asyncio.wait([replay], timeout=5)
        assert replay.done()
        assert pool.index.holdings() == {} and pool.ages == {} and pool.peaks == {}
    finally:
        await subscriber.aclose()
        context.destroy(linger=0)

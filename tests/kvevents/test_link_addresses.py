"""Event addresses a pool may name that ZMQ takes only with the right socket options: an
IPv6 endpoint (`[fd00::5]:8000`, as discovery gives pods of an IPv6 cluster) fills the
pattern with a bracketed IPv6 host, which a socket without `IPV6` accepts at `connect`
but never reaches (the worker waited for events for ever, never precise)."""

from __future__ import annotations

import asyncio
import socket

import pytest
import zmq
import zmq.asyncio

from kinference.kvcache.pool import PoolCaches
from kinference.kvevents.replay import ReplayLimits, fetch
from kinference.kvevents.subscriber import EventSubscriber, Feed
from kinference.kvevents.trust import WorkerTrust
from tests.api.helpers import wait_until
from tests.kvevents import vllm_format as vllm


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")


async def test_a_feed_at_an_ipv6_address_hears_its_engine() -> None:
    context = zmq.asyncio.Context()
    publisher = context.socket(zmq.PUB)
    publisher.setsockopt(zmq.IPV6, 1)
    port = publisher.bind_to_random_port("tcp://[::1]")
    subscriber = EventSubscriber(lambda: 0.0)
    pool = PoolCaches("p", 4)
    trust = pool.trust[0] = WorkerTrust(5.0, 10.0)
    feed = Feed(pool, 0, f"[::1]:{port}", f"tcp://[::1]:{port}", None, b"", trust)
    subscriber.add(feed)
    batch = vllm.encode([vllm.stored([1], [1, 2, 3, 4])])
    try:

        async def heard() -> bool:  # a PUB drops what it sends before the SUB connected
            await publisher.send_multipart([b"", vllm.seq_bytes(0), batch])
            return feed.batches > 0

        for _ in range(500):
            if await heard():
                break
            await asyncio.sleep(0.01)
        await wait_until(lambda: feed.batches > 0, what="a batch over IPv6")
    finally:
        await subscriber.aclose()
        context.destroy(linger=0)


async def test_a_replay_at_an_ipv6_address_is_answered() -> None:
    context = zmq.asyncio.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.IPV6, 1)
    port = router.bind_to_random_port("tcp://[::1]")

    async def answer() -> None:
        client, _, _start = await router.recv_multipart()
        await router.send_multipart([client, b"", vllm.seq_bytes(0), b"x"])
        await router.send_multipart([client, b"", vllm.seq_bytes(-1), b""])

    answering = asyncio.create_task(answer())
    got: dict[int, bytes] = {}
    limits = ReplayLimits(10, 1 << 20, 5.0, 10.0, 1)
    try:
        outcome = await fetch(context, f"tcp://[::1]:{port}", 0, None, got=got, limits=limits)
        assert (outcome.value, got) == ("complete", {0: b"x"})
    finally:
        answering.cancel()
        context.destroy(linger=0)

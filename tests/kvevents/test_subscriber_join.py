"""A feed joining an engine that offers a replay socket asks it for all it buffers (the
PUB socket dropped what it sent before the subscription): live batches held meanwhile that
the replay also brought are applied once, and the worker is trusted once caught up."""

from __future__ import annotations

import asyncio

import zmq
import zmq.asyncio

from kinference.kvcache.pool import PoolCaches
from kinference.kvevents.subscriber import EventSubscriber, Feed
from kinference.kvevents.trust import Distrust, WorkerTrust
from tests.api.helpers import wait_until
from tests.kvevents import vllm_format as vllm


def _batch(n: int) -> bytes:
    return vllm.encode([vllm.stored([n + 1], list(range(4 * n, 4 * n + 4)))])


def _feed(address: str, replay: str | None) -> tuple[EventSubscriber, PoolCaches, Feed]:
    pool = PoolCaches("p", 4)
    trust = pool.trust[0] = WorkerTrust(5.0, 10.0, can_replay=replay is not None)
    return EventSubscriber(lambda: 0.0), pool, Feed(pool, 0, "e0", address, replay, b"", trust)


async def test_live_batches_the_replay_also_brought_are_applied_once(
    router: tuple[zmq.asyncio.Socket, str],
) -> None:
    publisher = vllm.Publisher()
    subscriber, pool, feed = _feed(f"tcp://127.0.0.1:{publisher.port}", router[1])
    trust, (router_socket, _) = feed.trust, router
    try:
        await publisher.publish(_batch(0))  # before the subscription: dropped by the PUB
        subscriber.add(feed)
        client, _, start = await asyncio.wait_for(router_socket.recv_multipart(), 5)
        assert int.from_bytes(start, "big") == 0 and feed.replaying
        # It may hold warm blocks not known yet: not "no events yet" (taken as holding
        # nothing), but replaying (approximate, DEGRADED) until the replay is applied.
        assert trust.distrust is Distrust.REPLAYING
        await publisher.subscribed()
        await publisher.publish(_batch(1))  # live, while the replay runs: held
        await wait_until(lambda: len(feed.pending) == 1, what="batch 1 held")
        for n in (0, 1):  # 1 was buffered by the time the replay was served
            await router_socket.send_multipart([client, b"", vllm.seq_bytes(n), _batch(n)])
        await router_socket.send_multipart([client, b"", vllm.seq_bytes(-1), b""])
        await wait_until(lambda: not feed.replaying, what="replay done")
        assert trust.distrust is None and trust.next_seq == 2
        assert feed.batches == 2  # each once (batch 1 twice would read as a restart)
        assert len(pool.index.held(0)) == 2  # batch 0, known from the replay only
    finally:
        await subscriber.aclose()
        await publisher.close()


async def test_without_a_replay_socket_nothing_is_asked_for() -> None:
    publisher = vllm.Publisher()
    subscriber, _, feed = _feed(f"tcp://127.0.0.1:{publisher.port}", None)
    trust = feed.trust
    try:
        subscriber.add(feed)
        await publisher.subscribed()
        assert not feed.replaying and feed.replay is None
        assert trust.distrust is Distrust.AWAITING
    finally:
        await subscriber.aclose()
        await publisher.close()


async def test_an_engine_restarted_unseen_is_replayed_from_its_first_batch(
    router: tuple[zmq.asyncio.Socket, str],
) -> None:
    """The sequence goes back, not to 0 (the new process's first batches were missed):
    the old blocks are forgotten and the new ones asked for from 0."""
    subscriber, pool, feed = _feed("tcp://127.0.0.1:9", router[1])  # never added: no join
    trust, (router_socket, _) = feed.trust, router
    try:
        for n in range(4):
            subscriber.receive(feed, [b"", vllm.seq_bytes(n), _batch(n)])
        subscriber.receive(feed, [b"", vllm.seq_bytes(2), _batch(12)])  # a new engine's 2
        client, _, start = await asyncio.wait_for(router_socket.recv_multipart(), 5)
        assert int.from_bytes(start, "big") == 0 and trust.distrust is Distrust.REPLAYING
        for n in (0, 1):
            await router_socket.send_multipart([client, b"", vllm.seq_bytes(n), _batch(10 + n)])
        await wait_until(lambda: not feed.replaying, what="replay done")
        assert trust.distrust is None and trust.next_seq == 3
        assert len(pool.index.held(0)) == 3  # 10, 11 and 12 only
    finally:
        await subscriber.aclose()

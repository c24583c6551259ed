"""A feed joining an engine whose replay socket goes wrong, or whose engine restarts while
it joins, and a crowd of engines joined at once. While the join replay runs the worker is
`REPLAYING` (approximate, DEGRADED); a replay cut short (no end marker, garbage, an endless
answer, silence) applies what came and leaves the worker a gap, precise again once the
rest comes (the next live batch asks for it); nothing is left behind."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
import zmq
import zmq.asyncio

from kinference.kvcache.pool import PoolCaches
from kinference.kvevents import missed as missed_module
from kinference.kvevents.replay import ReplayLimits
from kinference.kvevents.subscriber import EventSubscriber, Feed
from kinference.kvevents.trust import Distrust, WorkerTrust
from kinference.kvevents.wire import decode_batch
from tests.api.helpers import wait_until
from tests.kvevents import vllm_format as vllm

LIMITS = dataclasses.replace(ReplayLimits.of(), timeout_s=0.3, max_batches=3)


def _batch(n: int, salt: int = 0) -> bytes:
    """Batch `n` of a process (`salt`: another process's batch `n` holds other tokens)."""
    first = salt + 4 * n
    return vllm.encode([vllm.stored([salt + n + 1], list(range(first, first + 4)))])


@dataclasses.dataclass
class _Joining:
    """A feed joining an engine: its live PUB socket, and the replay request `client` sent
    to the test's ROUTER."""

    publisher: vllm.Publisher
    subscriber: EventSubscriber
    pool: PoolCaches
    feed: Feed
    client: bytes


@contextlib.asynccontextmanager
async def _joining(
    router: tuple[zmq.asyncio.Socket, str], limits: ReplayLimits = LIMITS
) -> AsyncIterator[_Joining]:
    publisher = vllm.Publisher()
    pool = PoolCaches("p", 4)
    trust = pool.trust[0] = WorkerTrust(5.0, 10.0, can_replay=True)
    feed = Feed(pool, 0, "e0", f"tcp://127.0.0.1:{publisher.port}", router[1], b"", trust)
    subscriber = EventSubscriber(lambda: 0.0, limits=limits)
    try:
        subscriber.add(feed)
        client, _, start = await asyncio.wait_for(router[0].recv_multipart(), 5)
        assert int.from_bytes(start, "big") == 0 and trust.distrust is Distrust.REPLAYING
        yield _Joining(publisher, subscriber, pool, feed, client)
    finally:
        await subscriber.aclose()
        await publisher.close()


async def _send(router: zmq.asyncio.Socket, client: bytes, seq: int, payload: bytes) -> None:
    await router.send_multipart([client, b"", vllm.seq_bytes(seq), payload])


def _open_dealers(subscriber: EventSubscriber) -> list[Any]:
    sockets = subscriber._context._sockets
    return [s for s in sockets if not s.closed and s.type == zmq.DEALER]


@pytest.mark.parametrize("cut", ["no-end-marker", "garbage", "endless"])
async def test_a_join_replay_cut_short_leaves_a_gap_until_the_rest_comes(
    router: tuple[zmq.asyncio.Socket, str], cut: str
) -> None:
    """Batches 0..2 come, then no end marker, a garbage answer, or more than the replay
    may take: 0..2 are applied, and the worker is a gap (it used to be precise, missing
    what the engine buffered after 2). Live batch 5 then asks for 3 and 4: precise."""
    router_socket = router[0]
    async with _joining(router) as joining:
        pool, feed, client, trust = joining.pool, joining.feed, joining.client, joining.feed.trust
        for n in range(3):
            await _send(router_socket, client, n, _batch(n))
        if cut == "garbage":
            await router_socket.send_multipart([client, b"", b"\x01", b""])
        elif cut == "endless":
            await _send(router_socket, client, 3, _batch(3))
        await wait_until(lambda: not feed.replaying, what="join replay ended")
        assert trust.distrust is Distrust.GAP and pool.index.blocks(0) == 3
        assert not _open_dealers(joining.subscriber)
        await joining.publisher.subscribed()
        await joining.publisher.publish(_batch(5), seq=5)
        client, _, start = await asyncio.wait_for(router_socket.recv_multipart(), 5)
        assert int.from_bytes(start, "big") == 3
        for n in (3, 4):
            await _send(router_socket, client, n, _batch(n))
        await wait_until(lambda: not feed.replaying, what="gap replay done")
        assert trust.distrust is None and pool.index.blocks(0) == 6


async def test_a_replay_socket_that_never_answers_leaves_nothing_behind(
    router: tuple[zmq.asyncio.Socket, str],
) -> None:
    """Silent: DEGRADED while it is waited for, then a gap (it used to read as "no
    events yet", taken as holding nothing); its socket and task end; live batch 0 makes
    the worker precise."""
    before = asyncio.all_tasks()
    async with _joining(router) as joining:  # asked, never answered
        feed = joining.feed
        await wait_until(lambda: not feed.replaying, what="join replay given up")
        assert feed.trust.distrust is Distrust.GAP
        assert feed.replay is not None and feed.replay.done()
        assert not _open_dealers(joining.subscriber)
        await joining.publisher.subscribed()
        await joining.publisher.publish(_batch(0))
        await wait_until(lambda: feed.trust.distrust is None, what="precise from batch 0")
        assert joining.pool.index.blocks(0) == 1
    assert asyncio.all_tasks() == before


@pytest.mark.parametrize("live", [2, 6], ids=["fewer", "more"])
async def test_an_engine_restarted_during_the_join_counts_by_its_live_batches(
    router: tuple[zmq.asyncio.Socket, str], live: int
) -> None:
    """The replay brings the old process's 0..3; the new process publishes its own 0..
    meanwhile (held). Same seqs, other batches: the old ones are not applied and the
    new ones are (they used to be dropped as already replayed; with more of them than
    the old buffer, the new process's 4 and 5 extended the old one's blocks, precise)."""
    router_socket = router[0]
    async with _joining(router, ReplayLimits.of()) as joining:
        pool, feed, client = joining.pool, joining.feed, joining.client
        await joining.publisher.subscribed()
        for n in range(live):  # the new process, live
            await joining.publisher.publish(_batch(n, salt=100))
        await wait_until(lambda: len(feed.pending) == live, what="live batches held")
        for n in range(4):  # the old process's buffer, served before it stopped
            await _send(router_socket, client, n, _batch(n))
        await _send(router_socket, client, -1, b"")
        await wait_until(lambda: not feed.replaying, what="join done")
        assert feed.trust.distrust is None and feed.trust.next_seq == live
        new = PoolCaches("new", 4)  # what the new process holds
        for n in range(live):
            new.apply(0, decode_batch(_batch(n, salt=100)).events)
        assert set(pool.index.held(0)) == set(new.index.held(0))


async def test_a_buffer_no_longer_starting_at_0_is_not_asked_for_again(
    router: tuple[zmq.asyncio.Socket, str],
) -> None:
    """The engine buffers 5..9 (0..4 are gone for good): they are applied and the worker
    is a gap (trusted after `resync_after_s`), without asking for 0..4 (vLLM would resend
    its whole buffer, the replica read it to the end, and find 0..4 missing anyway)."""
    router_socket = router[0]
    async with _joining(router, ReplayLimits.of()) as joining:
        pool, feed, client = joining.pool, joining.feed, joining.client
        for n in range(5, 10):
            await _send(router_socket, client, n, _batch(n))
        await _send(router_socket, client, -1, b"")
        await wait_until(lambda: not feed.replaying, what="join done")
        assert feed.trust.distrust is Distrust.GAP and pool.index.blocks(0) == 5
        assert feed.trust.trusted(10.0)  # after resync_after_s
        assert await router_socket.poll(100) == 0  # nothing asked again


async def test_a_crowd_of_engines_is_replayed_a_few_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """32 warm engines when the replica starts: each is replayed and precise, with at
    most `concurrency` replays at once (each holding its decoded batches)."""
    running, most = 0, 0
    fetch = missed_module.fetch

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal running, most
        running += 1
        most = max(most, running)
        try:
            return await fetch(*args, **kwargs)
        finally:
            running -= 1

    monkeypatch.setattr(missed_module, "fetch", counted)
    publishers = [vllm.Publisher(replay=True) for _ in range(32)]
    pool = PoolCaches("p", 4)
    subscriber = EventSubscriber(lambda: 0.0, limits=ReplayLimits.of())
    feeds = []
    try:
        for slot, publisher in enumerate(publishers):
            for n in range(5):  # before the replica subscribed: only the replay has them
                await publisher.publish(_batch(n, salt=1000 * slot), drop=True)
            trust = pool.trust[slot] = WorkerTrust(5.0, 10.0, can_replay=True)
            feeds.append(
                Feed(
                    pool,
                    slot,
                    f"e{slot}",
                    f"tcp://127.0.0.1:{publisher.port}",
                    f"tcp://127.0.0.1:{publisher.replay_port}",
                    b"",
                    trust,
                )
            )
        for feed in feeds:
            subscriber.add(feed)
        await wait_until(
            lambda: all(f.trust.distrust is None for f in feeds), within_s=30, what="all precise"
        )
        assert all(pool.index.blocks(slot) == 5 for slot in range(32))
        assert 1 < most <= ReplayLimits.of().concurrency
        assert not _open_dealers(subscriber)
    finally:
        await subscriber.aclose()
        for publisher in publishers:
            await publisher.close()

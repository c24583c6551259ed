"""The live socket against an engine that sends a frame over the size cap: libzmq refuses
it as it comes in (never queued whole, never decoded), ends the session as a protocol error
and does not reconnect. The feed sees that on its monitor socket, marks the worker
`dropped` (approximate, DEGRADED) and reopens its socket; the worker is precise again once
the reopened socket hears a batch in sequence, or once the batches it missed are replayed.
An ordinary disconnect is left to ZMQ's own reconnect."""

from __future__ import annotations

import errno
from typing import Any

import pytest
import zmq

from kinference.kvcache.pool import PoolCaches
from kinference.kvevents import link as link_module
from kinference.kvevents.link import MAX_FRAME_BYTES
from kinference.kvevents.subscriber import EventSubscriber, Feed
from kinference.kvevents.trust import Distrust, WorkerTrust
from tests.api.helpers import wait_until
from tests.kvevents import vllm_format as vllm


def _batch(n: int) -> bytes:
    return vllm.encode([vllm.stored([n + 1], list(range(4 * n, 4 * n + 4)))])


def _feed(
    publisher: vllm.Publisher, reopened: list[str]
) -> tuple[EventSubscriber, PoolCaches, Feed]:
    pool = PoolCaches("p", 4)
    replay = f"tcp://127.0.0.1:{publisher.replay_port}" if publisher.replay_port else None
    trust = pool.trust[0] = WorkerTrust(5.0, 10.0, can_replay=replay is not None)
    subscriber = EventSubscriber(lambda: 0.0, on_reopen=reopened.append)
    address = f"tcp://127.0.0.1:{publisher.port}"
    return subscriber, pool, Feed(pool, 0, "e0", address, replay, b"", trust)


async def _oversized(publisher: vllm.Publisher, feed: Feed) -> None:
    """A frame one byte over the cap; the worker is dropped for it."""
    await publisher.pub.send_multipart([b"", vllm.seq_bytes(1), bytes(MAX_FRAME_BYTES + 1)])
    await wait_until(lambda: feed.trust.distrust is Distrust.DROPPED, what="dropped")
    assert not feed.trust.trusted(0.0)


async def test_an_oversized_frame_reopens_the_socket_and_the_worker_is_precise_again() -> None:
    publisher, reopened = vllm.Publisher(), list[str]()
    subscriber, pool, feed = _feed(publisher, reopened)
    trust = feed.trust
    try:
        subscriber.add(feed)
        await publisher.subscribed()
        await publisher.publish(_batch(0))
        await wait_until(lambda: trust.trusted(0.0), what="precise from batch 0")
        await _oversized(publisher, feed)
        assert reopened == ["p"] and feed.reopens == 1 and feed.reconnects == 0
        await publisher.subscribed()  # the reopened socket
        for n in (1, 2):
            await publisher.publish(_batch(n))
        await wait_until(lambda: feed.batches == 3, what="batches 1 and 2 applied")
        assert trust.trusted(0.0) and pool.index.blocks(0) == 3
    finally:
        await subscriber.aclose()
        await publisher.close()


async def test_batches_published_while_the_socket_was_down_are_replayed() -> None:
    publisher, reopened = vllm.Publisher(replay=True), list[str]()
    subscriber, pool, feed = _feed(publisher, reopened)
    trust = feed.trust
    try:
        subscriber.add(feed)  # joins: the replay socket has nothing yet
        await publisher.subscribed()
        await wait_until(lambda: not feed.replaying, what="joined")
        await publisher.publish(_batch(0))
        await wait_until(lambda: trust.trusted(0.0), what="precise from batch 0")
        await _oversized(publisher, feed)
        await publisher.publish(_batch(1), drop=True)  # published while the socket was down
        await publisher.subscribed()  # reopened: no join again (batch 0 came)
        await publisher.publish(_batch(2))  # a gap: 1 asked for
        await wait_until(lambda: trust.trusted(0.0), what="replayed")
        assert trust.trusted(0.0) and pool.index.blocks(0) == 3 and feed.reopens == 1
    finally:
        await subscriber.aclose()
        await publisher.close()


async def test_an_ordinary_disconnect_is_left_to_zmq() -> None:
    """The engine's socket goes away and comes back on the same port: ZMQ reconnects by
    itself (the retry is announced at once), the socket is not reopened."""
    publisher, reopened = vllm.Publisher(), list[str]()
    subscriber, _, feed = _feed(publisher, reopened)
    try:
        subscriber.add(feed)
        await publisher.subscribed()
        await publisher.publish(_batch(0))
        await wait_until(lambda: feed.batches == 1, what="batch 0 applied")
        publisher.pub.close(linger=0)
        await wait_until(lambda: feed.reconnects == 1, what="ZMQ reconnecting")
        publisher.pub = publisher.context.socket(zmq.XPUB)
        publisher.pub.setsockopt(zmq.XPUB_VERBOSE, 1)
        publisher.pub.bind(f"tcp://127.0.0.1:{publisher.port}")
        await publisher.subscribed()
        await publisher.publish(_batch(1))
        await wait_until(lambda: feed.batches == 2, what="batch 1 applied")
        assert feed.trust.trusted(0.0) and feed.reopens == 0 and reopened == []
    finally:
        await subscriber.aclose()
        await publisher.close()


async def test_a_socket_zmq_will_not_open_is_tried_again_and_its_worker_is_dropped_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ZMQ refuses to make or connect the live socket (out of file descriptors, an ipc path
    over the kernel's limit): the feed does not end (its worker waited for events for
    ever, "no events yet"); the worker is `dropped` while the feed tries again, after the
    reopen's wait, and precise once the socket opens and hears batch 0."""
    publisher, reopened = vllm.Publisher(), list[str]()
    subscriber, _, feed = _feed(publisher, reopened)
    refusals = [zmq.ZMQError(errno.EMFILE)]
    real = link_module.Link.__init__

    def opening(self: link_module.Link, *args: Any) -> None:
        if refusals:
            raise refusals.pop()
        real(self, *args)

    monkeypatch.setattr(link_module.Link, "__init__", opening)
    monkeypatch.setattr(link_module, "REOPEN_FIRST_S", 0.0)
    try:
        subscriber.add(feed)
        await wait_until(lambda: feed.reopens == 1, what="the refused open counted")
        assert reopened == ["p"] and feed.task is not None and not feed.task.done()
        await publisher.subscribed()
        await publisher.publish(_batch(0))
        await wait_until(lambda: feed.trust.trusted(0.0), what="precise from batch 0")
    finally:
        await subscriber.aclose()
        await publisher.close()


async def test_a_refused_socket_leaves_its_worker_dropped_until_it_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    publisher, reopened = vllm.Publisher(), list[str]()
    subscriber, _, feed = _feed(publisher, reopened)

    def refused(self: link_module.Link, *args: Any) -> None:
        raise zmq.ZMQError(errno.ENAMETOOLONG)

    monkeypatch.setattr(link_module.Link, "__init__", refused)
    try:
        subscriber.add(feed)
        await wait_until(lambda: feed.reopens >= 1, what="the refused open counted")
        assert feed.trust.distrust is Distrust.DROPPED and not feed.trust.trusted(0.0)
    finally:
        await subscriber.aclose()
        await publisher.close()

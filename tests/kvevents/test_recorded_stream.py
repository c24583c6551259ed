"""A recorded engine stream (docs/h201/mocker_batches.msgpack: 526 batches from Dynamo's
mocker) leaves the precise pool exactly as main d0465f5 left it after every batch: the
index's maps, the eviction order, the peaks and capacity, the trust; taken in process or
through a socket at once. `stream_digest` folds that state after each applied batch;
`MAIN` is what main's code gave (computed by running this module's function against a
`git archive` of it: docs/benchmarks.md, h205)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import msgpack
import zmq

from kinference.kvcache.pool import PoolCaches
from kinference.kvevents.subscriber import EventSubscriber, Feed
from kinference.kvevents.trust import WorkerTrust
from tests.api.helpers import wait_until

RECORDING = Path(__file__).resolve().parents[2] / "docs" / "h201" / "mocker_batches.msgpack"
MAIN = "b8f09f3806bf7febe8f2f03de434a27b1e344cbb9b152cc3dfd6d574b2a9b1f0"


def _recorded() -> list[list[bytes]]:
    pairs = msgpack.unpackb(RECORDING.read_bytes())
    return [[b"", seq.to_bytes(8, "big", signed=True), payload] for seq, payload in pairs]


def _state(pool: PoolCaches) -> bytes:
    """The pool's worker 0 as the events made it, in each map's order."""
    worker: Any = pool.index._workers.get(0)
    ages = pool.ages.get(0)
    trust = pool.trust[0]
    parts: list[object] = [
        None if worker is None else (worker.named, worker.held, worker.orphans, worker.tail),
        None
        if ages is None
        else (
            ages.touched, ages.live, ages.evicted, ages.touches, ages.alias, ages.splits,
            ages.members, ages.lists,
        ),
        pool.peaks, pool.capacity, trust.next_seq, trust.stream,
    ]  # fmt: skip
    return repr(parts).encode()


def _fed() -> tuple[EventSubscriber, PoolCaches, Feed, Any]:
    """A subscriber and a pool of one worker, the state folded after each applied batch."""
    pool = PoolCaches("p", 16, clock=lambda: 0.0)
    trust = pool.trust[0] = WorkerTrust(5.0, 10.0)
    digest = hashlib.sha256()

    def on_message(ref: str, outcome: str) -> None:
        if outcome == "applied":
            digest.update(hashlib.sha256(_state(pool)).digest())

    subscriber = EventSubscriber(lambda: 0.0, on_message)
    feed = Feed(pool, 0, "e0", "inproc://recorded-engine", None, b"", trust)
    return subscriber, pool, feed, digest


def stream_digest() -> str:
    """The recorded stream taken in process (`EventSubscriber.receive`)."""
    subscriber, _, feed, digest = _fed()
    try:
        for message in _recorded():
            subscriber.receive(feed, message)
    finally:
        subscriber._context.destroy(linger=0)
    assert feed.batches == len(_recorded())
    return digest.hexdigest()


def test_the_recorded_stream_leaves_what_main_left() -> None:
    assert stream_digest() == MAIN


async def test_through_a_socket_at_once_it_leaves_the_same() -> None:
    subscriber, _, feed, digest = _fed()
    publisher = subscriber._context.socket(zmq.XPUB)
    publisher.bind("inproc://recorded-engine")
    messages = _recorded()
    try:
        subscriber.add(feed)
        assert (await publisher.recv())[:1] == b"\x01"  # subscribed
        for message in messages:  # inproc: queued in the subscriber's socket at once
            await publisher.send_multipart(message)
        await wait_until(lambda: feed.batches == len(messages), 60, "the stream applied")
    finally:
        publisher.close(linger=0)
        await subscriber.aclose()
    assert feed.batches == len(messages)
    assert digest.hexdigest() == MAIN

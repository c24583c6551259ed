"""A publisher that sends faster than the loop applies: what waits to be applied is bounded
in bytes. ZMQ's receive queue bounds messages only (100k of up to 16 MiB each), and a
flood of 5 MiB batches measured 2.2 GB held after 6 s (docs/benchmarks.md, h191). The
feed takes waiting messages off its socket as it goes, keeps `MAX_QUEUED_BYTES` of them
and drops the rest unread (counted `overflow`): a gap from the drop, not only once the
batches queued ahead of it are applied and the next one taken shows it."""

from __future__ import annotations

import pytest
import zmq

from kinference.kvcache.pool import PoolCaches
from kinference.kvevents import link as link_module
from kinference.kvevents.subscriber import EventSubscriber, Feed
from kinference.kvevents.trust import Distrust, WorkerTrust
from tests.api.helpers import wait_until
from tests.kvevents import vllm_format as vllm


def _batch(n: int, blocks: int = 256) -> bytes:
    hashes = list(range(n * blocks + 1, (n + 1) * blocks + 1))
    return vllm.encode([vllm.stored(hashes, [n] * (4 * blocks))])


async def test_a_flood_is_held_to_a_byte_bound_and_the_rest_is_a_gap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    size = len(_batch(0)) + 16  # its frames
    monkeypatch.setattr(link_module, "MAX_QUEUED_BYTES", 3 * size, raising=False)
    outcomes: list[str] = []
    subscriber = EventSubscriber(
        lambda: 0.0, on_message=lambda _, outcome: outcomes.append(outcome)
    )
    # inproc: a message sent is in the subscriber's queue when `send` returns
    publisher = subscriber._context.socket(zmq.XPUB)
    publisher.bind("inproc://flooding-engine")
    pool = PoolCaches("p", 4)
    trust = pool.trust[0] = WorkerTrust(5.0, 10.0)
    feed = Feed(pool, 0, "e0", "inproc://flooding-engine", None, b"", trust)
    try:
        subscriber.add(feed)
        assert (await publisher.recv())[:1] == b"\x01"  # subscribed
        for n in range(20):  # none taken meanwhile: each send is done at once, no await
            await publisher.send_multipart([b"", vllm.seq_bytes(n), _batch(n)])
        await wait_until(
            lambda: feed.batches + outcomes.count("overflow") == 20, what="the queue applied"
        )
        # The batches queued ahead of the dropped ones were in order: the sequence shows
        # no gap yet, but the drops did (it used to stay precise until batch 20 came).
        assert trust.next_seq is not None and trust.next_seq < 20
        assert trust.distrust is Distrust.GAP and not trust.trusted(0.0)
        await publisher.send_multipart([b"", vllm.seq_bytes(20), _batch(20)])
        await wait_until(lambda: trust.next_seq == 21, what="the last batch taken")
        # 0 (maybe taken before the rest came), 3 queued, the rest dropped; then 20
        dropped = outcomes.count("overflow")
        assert feed.batches + dropped == 21 and feed.batches <= 5 and dropped >= 16
        assert trust.distrust is Distrust.GAP
    finally:
        publisher.close(linger=0)
        await subscriber.aclose()

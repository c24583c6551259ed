"""The subscriber against streams and replay sockets that go wrong. A feed stopped while
its replay is under way (the endpoint left the pool, or its address changed) leaves
nothing behind: what the replay fetches is not applied to the worker's slot, which
`PreciseEvents` has just forgotten (and which another endpoint may take). A replay socket
that never ends its answer does not keep the worker replaying: the replay ends once every
missed batch came, or at its deadline. What is held meanwhile is bounded and stays in
order. Negative sequence numbers and floods of malformed messages are malformed batches,
counted each, logged once."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import zmq
import zmq.asyncio

from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.kvcache.pool import PoolCaches
from kinference.kvcache.precise import PreciseCaches
from kinference.kvevents import feed as feed_module
from kinference.kvevents.replay import ReplayLimits
from kinference.kvevents.subscriber import EventSubscriber, Feed
from kinference.kvevents.trust import Distrust, WorkerTrust
from tests.api.helpers import wait_until
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


async def _replaying(
    router: zmq.asyncio.Socket, port: int, limits: ReplayLimits | None = None
) -> tuple[EventSubscriber, PoolCaches, Feed, bytes]:
    """A feed that applied batch 0, then got batch 3: replaying 1 and 2 (asked for)."""
    subscriber = EventSubscriber(lambda: 0.0, limits=limits)
    pool = PoolCaches("p", 4)
    trust = pool.trust[0] = WorkerTrust(5.0, 10.0, can_replay=True)
    feed = Feed(pool, 0, "e0", "tcp://127.0.0.1:9", f"tcp://127.0.0.1:{port}", b"", trust)
    subscriber.add(feed)
    subscriber.receive(feed, [b"", vllm.seq_bytes(0), _batch(0)])
    subscriber.receive(feed, [b"", vllm.seq_bytes(3), _batch(3)])
    client, _, start = await asyncio.wait_for(router.recv_multipart(), 5)
    assert int.from_bytes(start, "big") == 1 and feed.replaying
    return subscriber, pool, feed, client


async def test_a_replay_that_never_ends_is_given_up() -> None:
    """The replay socket keeps answering with batches before the one asked for (each within
    the per-message timeout): at the replay's deadline the worker is a gap, and the live
    batches held meanwhile are applied."""
    context = zmq.asyncio.Context()
    router = context.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    limits = dataclasses.replace(ReplayLimits.of(), deadline_s=0.3)
    subscriber, pool, feed, client = await _replaying(router, port, limits)
    try:
        subscriber.receive(feed, [b"", vllm.seq_bytes(4), _batch(4)])  # held meanwhile

        async def not_asked_for() -> None:
            while True:
                await router.send_multipart([client, b"", vllm.seq_bytes(0), _batch(0)])
                await asyncio.sleep(0.05)

        sending = asyncio.get_running_loop().create_task(not_asked_for())
        try:
            await wait_until(lambda: not feed.replaying, within_s=5)
        finally:
            sending.cancel()
        assert feed.trust.distrust is Distrust.GAP
        assert pool.index.blocks(0) == 3  # 0, then 3 and 4 held while replaying
    finally:
        await subscriber.aclose()
        context.destroy(linger=0)


async def test_a_replay_is_done_once_every_missed_batch_came() -> None:
    """The replay socket sends the missed batches and then nothing (no end marker): they
    are applied and the worker is precise again, without waiting for the marker."""
    context = zmq.asyncio.Context()
    router = context.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    subscriber, pool, feed, client = await _replaying(router, port)
    try:
        for n in (1, 2):
            await router.send_multipart([client, b"", vllm.seq_bytes(n), _batch(n)])
        await wait_until(lambda: not feed.replaying)
        assert feed.trust.distrust is None and pool.index.blocks(0) == 4
    finally:
        await subscriber.aclose()
        context.destroy(linger=0)


@pytest.mark.parametrize("seq", [-1, -5, -(2**63)])
async def test_a_negative_sequence_number_is_malformed(seq: int) -> None:
    """Live batches are numbered from 0 (-1 ends a replay's answer): a negative number is
    not a gap to replay (an empty range, so a replay "complete" at once that made the
    worker precise on nothing), it is a malformed batch."""
    publisher = vllm.Publisher(replay=True)
    subscriber = EventSubscriber(lambda: 0.0)
    pool = PoolCaches("p", 4)
    trust = pool.trust[0] = WorkerTrust(5.0, 10.0, can_replay=True)
    replay = f"tcp://127.0.0.1:{publisher.replay_port}"
    feed = Feed(pool, 0, "e0", "tcp://127.0.0.1:9", replay, b"", trust)
    try:
        subscriber.add(feed)
        subscriber.receive(feed, [b"", vllm.seq_bytes(seq), _batch(0)])
        await wait_until(lambda: not feed.replaying)
        assert trust.distrust is Distrust.MALFORMED and not trust.trusted(0.0)
        assert pool.index.blocks(0) == 0
    finally:
        await subscriber.aclose()
        await publisher.close()


async def test_live_batches_held_during_a_replay_are_bounded_in_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Live batches keep coming while a replay runs: they are held up to `MAX_PENDING_BYTES`
    of payload (a count alone let 10k long-prompt steps pile up), the rest dropped; once
    the replay ends, the drop is a gap like any other."""
    size = len(_batch(5))
    monkeypatch.setattr(feed_module, "MAX_PENDING_BYTES", 3 * size)
    context = zmq.asyncio.Context()
    router = context.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    subscriber, pool, feed, client = await _replaying(router, port)
    try:
        for n in range(4, 14):
            subscriber.receive(feed, [b"", vllm.seq_bytes(n), _batch(n)])
        assert [seq for seq, _ in feed.pending] == [3, 4, 5, 6]  # the trigger, then 3 held
        for n in (1, 2):
            await router.send_multipart([client, b"", vllm.seq_bytes(n), _batch(n)])
        await wait_until(lambda: not feed.replaying)
        assert feed.trust.distrust is None and pool.index.blocks(0) == 7
        subscriber.receive(feed, [b"", vllm.seq_bytes(14), _batch(14)])  # 7..13 missed
        assert feed.replaying and feed.trust.replay_from == 7
    finally:
        await subscriber.aclose()
        context.destroy(linger=0)


async def test_batches_held_after_a_second_gap_wait_for_its_replay() -> None:
    """Among the live batches held during a replay, one is malformed (or a gap): when the
    replay ends and they are stepped through, that one starts a second replay, and the
    batches after it are held for it in turn, not applied before the batch it fetches."""
    context = zmq.asyncio.Context()
    router = context.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    subscriber, pool, feed, client = await _replaying(router, port)
    try:
        subscriber.receive(feed, [b"", vllm.seq_bytes(4), _batch(4)])
        subscriber.receive(feed, [b"", vllm.seq_bytes(5), b"\xc1"])  # not msgpack
        for n in (6, 7):
            subscriber.receive(feed, [b"", vllm.seq_bytes(n), _batch(n)])
        for n in (1, 2):
            await router.send_multipart([client, b"", vllm.seq_bytes(n), _batch(n)])
        client, _, start = await asyncio.wait_for(router.recv_multipart(), 5)
        assert int.from_bytes(start, "big") == 5 and feed.replaying
        assert pool.index.blocks(0) == 5  # 0 to 4; 6 and 7 wait for 5
        assert [seq for seq, _ in feed.pending] == [5, 6, 7]
        await router.send_multipart([client, b"", vllm.seq_bytes(5), _batch(5)])
        await wait_until(lambda: not feed.replaying)
        assert feed.trust.distrust is None and pool.index.blocks(0) == 8
    finally:
        await subscriber.aclose()
        context.destroy(linger=0)


def test_a_flood_of_malformed_messages_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    """Malformed messages are counted each, logged once until a good one comes."""
    subscriber = EventSubscriber(lambda: 0.0)
    pool = PoolCaches("p", 4)
    trust = pool.trust[0] = WorkerTrust(5.0, 10.0)
    feed = Feed(pool, 0, "e0", "tcp://127.0.0.1:9", None, b"", trust)
    with caplog.at_level("WARNING", logger="kinference.kvevents.subscriber"):
        for n in range(1000):
            subscriber.receive(feed, [b"", vllm.seq_bytes(n), b"\xc1"])
        subscriber.receive(feed, [b"", vllm.seq_bytes(1000), _batch(0)])
        subscriber.receive(feed, [b"", vllm.seq_bytes(1001), b"\xc1"])
    assert len(caplog.records) == 2
    subscriber._context.destroy(linger=0)


def test_an_engine_on_another_block_size_is_not_trusted() -> None:
    """The policy says blocks of 4 tokens, the engine stores blocks of 8: none of its
    blocks can ever match a prompt cut in 4s, so it is not precise (DEGRADED, naming why)
    rather than precise and never matching; once it publishes blocks of 4 (restarted, from
    batch 0) it is."""
    subscriber = EventSubscriber(lambda: 0.0)
    caches = PreciseCaches(clock=lambda: 0.0)
    pool = caches.pools["p"] = PoolCaches("p", 4)
    trust = pool.trust[0] = WorkerTrust(5.0, 10.0)
    pool.endpoints[0] = "e0"
    feed = Feed(pool, 0, "e0", "tcp://127.0.0.1:9", None, b"", trust)
    eight = vllm.encode([vllm.stored([1], list(range(8)), block_size=8)])
    subscriber.receive(feed, [b"", vllm.seq_bytes(0), eight])
    assert trust.distrust is Distrust.BLOCK_SIZE and not trust.trusted(100.0)
    assert pool.index.blocks(0) == 0  # not applied
    subscriber.receive(feed, [b"", vllm.seq_bytes(1), _batch(1)])  # 4s now: still not
    assert not trust.trusted(100.0)
    prompt = PromptBlocks(12, 4, tuple(identities(list(range(12)), 4)))
    match = caches.match("p", prompt, [0])
    assert match is not None and "block size" in (match.degraded() or "")
    subscriber.receive(feed, [b"", vllm.seq_bytes(0), _batch(0)])  # restarted, on 4s
    assert trust.trusted(100.0) and pool.index.blocks(0) == 1
    subscriber._context.destroy(linger=0)


async def test_a_long_backlog_held_during_a_replay_is_applied_in_order() -> None:
    """Thousands of live batches held while a replay runs (taken from the front of a deque,
    not `list.pop(0)`), each storing the next block of one chain: once the replay ends all
    are applied, in order (one out of order would be an orphan, or a sequence gone back)."""
    context = zmq.asyncio.Context()
    router = context.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    subscriber, pool, feed, client = await _replaying(router, port)

    def chained(n: int) -> bytes:  # block n + 1, child of block n (batch 0's is block 1)
        return vllm.encode([vllm.stored([n + 1], list(range(4 * n, 4 * n + 4)), parent=n)])

    last = 3000
    try:
        for n in range(4, last + 1):
            subscriber.receive(feed, [b"", vllm.seq_bytes(n), chained(n)])
        assert len(feed.pending) == last - 2  # the trigger (3) and the ones after it
        for n in (1, 2):
            await router.send_multipart([client, b"", vllm.seq_bytes(n), chained(n)])
        await wait_until(lambda: not feed.replaying, what="replay and backlog applied")
        trust = feed.trust
        assert trust.distrust is None and trust.next_seq == last + 1 and not feed.pending
        # Batch 3 (the trigger) was taken unchained by `_replaying`: 0..2, then 3..last.
        assert pool.index.orphans(0) == 0 and pool.index.blocks(0) == last + 1
        first, rest = identities(range(12), 4), identities(range(12, 4 * (last + 1)), 4)
        assert pool.index.longest(first, [0]) == {0: 3}
        assert pool.index.longest(rest, [0]) == {0: last - 2}  # every block, chained
    finally:
        await subscriber.aclose()
        context.destroy(linger=0)

"""A real PUB socket on a free port, the subscriber's own loop reading it.

A batch larger than a step (`kvevents.steps`) is decoded and applied in slices, the loop
taking turns between them: what a Pick running between two slices sees is the worker still
precise and its index as after the batch's first events, in order (here: a run of the
stored prompt's leading blocks that only grows, one cut event at a time), never a block
without its ancestors. Batches taken from the socket with others waiting behind them and
stamped well before the last current one are late: the worker is not precise (LAGGING)
until a batch comes that is not."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

import zmq
import zmq.asyncio

from kinference.kvcache.blocks import identities
from kinference.kvcache.pool import PoolCaches
from kinference.kvevents.events import Event
from kinference.kvevents.steps import blocks_per_event
from kinference.kvevents.subscriber import EventSubscriber, Feed
from kinference.kvevents.trust import Distrust, WorkerTrust
from tests.api.helpers import wait_until
from tests.kvevents import vllm_format as vllm

BLOCKS = 200_000  # one-token blocks: ~1.2 MB, cut into events of `blocks_per_event(1)`


async def _feed(
    trust: WorkerTrust, outcomes: list[str]
) -> tuple[EventSubscriber, PoolCaches, Feed, vllm.Publisher]:
    publisher = vllm.Publisher()
    subscriber = EventSubscriber(lambda: 0.0, lambda pool, outcome: outcomes.append(outcome))
    pool = PoolCaches("p", 1)
    pool.trust[0] = trust
    feed = Feed(pool, 0, "e0", f"tcp://127.0.0.1:{publisher.port}", None, b"", trust)
    subscriber.add(feed)
    await asyncio.wait_for(publisher.subscribed(), 10)
    return subscriber, pool, feed, publisher


async def test_a_pick_between_slices_sees_the_batch_applied_in_order() -> None:
    subscriber, pool, feed, publisher = await _feed(WorkerTrust(5.0, 10.0), [])
    tokens = list(range(1, BLOCKS + 1))
    prompt = identities(tokens, 1)
    seen: list[tuple[int, bool]] = []  # what a Pick sees at each loop turn

    async def picks() -> None:
        while True:
            depth = pool.index.longest(prompt, [0])[0]
            seen.append((depth, feed.trust.trusted(0.0)))
            await asyncio.sleep(0)

    try:
        await publisher.publish(vllm.encode([vllm.stored([10**9], [0], block_size=1)]))
        await wait_until(lambda: feed.batches == 1)
        looking = asyncio.get_running_loop().create_task(picks())
        await publisher.publish(
            vllm.encode([vllm.stored(list(range(1, BLOCKS + 1)), tokens, block_size=1)])
        )
        await wait_until(lambda: feed.batches == 2, what="the large batch applied")
        looking.cancel()
        seen.append((pool.index.longest(prompt, [0])[0], feed.trust.trusted(0.0)))
    finally:
        await subscriber.aclose()
        await publisher.close()
    depths = [depth for depth, _ in seen]
    assert all(trusted for _, trusted in seen)
    assert depths == sorted(depths) and depths[-1] == BLOCKS
    between = set(depths) - {0, BLOCKS}
    per_event = blocks_per_event(1)
    assert len(between) >= BLOCKS // per_event // 2  # the loop had turns between slices
    assert all(depth % per_event == 0 for depth in between)  # whole cut events, in order


async def test_batches_applied_late_make_the_worker_not_precise_until_one_is_not() -> None:
    """Stamped 10 s before the one just applied when nothing waited behind it, and taken
    with others behind them: late (the engine's clock is not compared with ours: the
    subscriber's reads 0 throughout)."""
    outcomes: list[str] = []
    trust = WorkerTrust(5.0, 10.0, max_lag_s=2.0)
    subscriber, _, feed, publisher = await _feed(trust, outcomes)
    states: list[Distrust | None] = []
    real_step = subscriber._step

    def step(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        yield from real_step(*args, **kwargs)  # type: ignore[arg-type]
        states.append(trust.distrust)

    subscriber._step = step  # type: ignore[method-assign]
    try:
        await publisher.publish(vllm.encode([], ts=1000.0))
        await wait_until(lambda: feed.batches == 1)
        assert trust.distrust is None
        # A burst: each stamped 10 s before the last, as if each waited 10 s longer.
        for n in range(1, 51):
            await publisher.publish(vllm.encode([], ts=1000.0 - 10 * n))
        await wait_until(lambda: feed.batches == 51, what="the burst applied")
        await publisher.publish(vllm.encode([], ts=2000.0))  # alone: current again
        await wait_until(lambda: feed.batches == 52)
    finally:
        await subscriber.aclose()
        await publisher.close()
    assert Distrust.LAGGING in states and "lagging" in outcomes
    assert states[-1] is None and trust.trusted(0.0)


class HookedPool(PoolCaches):
    """Runs `hook` once, right after the slice naming block `at` is applied."""

    def __init__(self, at: int) -> None:
        super().__init__("p", 4)
        self.at = at
        self.hook: Callable[[], None] | None = None

    def apply(self, slot: int, events: Iterable[Event]) -> None:
        events = tuple(events)
        super().apply(slot, events)
        if self.hook and any(self.at in getattr(e, "block_hashes", ()) for e in events):
            hook, self.hook = self.hook, None
            hook()


def _stored(hashes: list[int | bytes], parent: int | None = None) -> bytes:
    tokens = [int(h) % 50_000 for h in hashes for _ in range(4)]
    return vllm.encode([vllm.stored(hashes, tokens, parent, block_size=4)])


async def test_a_live_batch_waits_for_the_held_batches_applied_in_slices() -> None:
    """Replaying, a large batch was held; while it is applied (in slices, after the replay)
    the next live batch comes: it is held too, and applied after the large one's last slice
    (its parent is that slice's last block: applied before, it would be an orphan)."""
    n, first = 20_000, 1000
    context = zmq.asyncio.Context()
    router = context.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    subscriber = EventSubscriber(lambda: 0.0)
    pool = HookedPool(at=first)
    trust = pool.trust[0] = WorkerTrust(5.0, 10.0, can_replay=True)
    feed = Feed(pool, 0, "e0", "tcp://127.0.0.1:9", f"tcp://127.0.0.1:{port}", b"", trust)
    live = [b"", vllm.seq_bytes(5), _stored([10**9], parent=first + n - 1)]
    pool.hook = lambda: subscriber.receive(feed, live)
    try:
        subscriber.add(feed)
        subscriber.receive(feed, [b"", vllm.seq_bytes(0), _stored([1])])
        subscriber.receive(feed, [b"", vllm.seq_bytes(3), _stored([4])])  # 1, 2 missed
        big: list[int | bytes] = list(range(first, first + n))
        subscriber.receive(feed, [b"", vllm.seq_bytes(4), _stored(big)])  # held
        client, _, _ = await asyncio.wait_for(router.recv_multipart(), 5)
        for seq in (1, 2):
            await router.send_multipart([client, b"", vllm.seq_bytes(seq), _stored([seq + 1])])
        await wait_until(lambda: not feed.replaying and feed.batches == 3)  # 0, 4, 5 live
    finally:
        await subscriber.aclose()
        context.destroy(linger=0)
    assert pool.hook is None  # the live batch came between two slices of the large one
    assert pool.index.orphans(0) == 0 and pool.index.blocks(0) == 4 + n + 1
    assert trust.distrust is None

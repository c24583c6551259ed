"""A real PUB socket on a free port, the subscriber's own loop reading it.

A batch larger than a step (`kvevents.steps`) is decoded and applied in slices, the loop
taking turns between them: what a Pick running between two slices sees is the worker still
precise and its index as after the batch's first events, in order (here: a run of the
stored prompt's leading blocks that only grows, one cut event at a time), never a block
without its ancestors."""

from __future__ import annotations

import asyncio

from kinference.kvcache.blocks import identities
from kinference.kvcache.pool import PoolCaches
from kinference.kvevents.steps import blocks_per_event
from kinference.kvevents.subscriber import EventSubscriber, Feed
from kinference.kvevents.trust import WorkerTrust
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

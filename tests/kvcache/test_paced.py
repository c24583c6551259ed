"""Rests of lazily tokenized prompts finishing together are applied a budget per loop
iteration (issue 16: 1 MiB prompts' rests cost 3-4 ms of loop each)."""

from __future__ import annotations

import asyncio

from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.kvcache.paced import Paced
from kinference.kvcache.precise import PreciseCaches
from tests.kvcache.trusted import trusted_pool


async def test_rests_ready_together_are_applied_in_order_one_loop_iteration_each() -> None:
    caches = PreciseCaches(clock=lambda: 1.0, rest_budget=0.0)  # one rest per iteration
    pool = trusted_pool(caches)
    blocks = tuple(identities(list(range(80)), 4))
    tickets = list(range(1, 11))
    for ticket in tickets:  # routed first; their rests all arrive in one loop iteration
        head = PromptBlocks(80, 4, blocks[:2], exact=False, ticket=ticket)
        caches.routed("p", ticket % 2, 0, head)
    loop = asyncio.get_running_loop()
    for ticket in tickets:  # as the tokenizer thread's `call_soon_threadsafe` calls land
        loop.call_soon(caches.completed, "p", ticket, blocks[: 2 + ticket])
    applied: list[list[int]] = []
    waiting = set(tickets)
    for _ in range(3 * len(tickets)):  # one step of this coroutine per loop iteration
        await asyncio.sleep(0)
        done = sorted(waiting - set(pool.claims))
        waiting -= set(done)
        applied.append(done)
    steps = [done for done in applied if done]
    assert steps == [[t] for t in tickets]  # each in an iteration of its own, in order
    assert set(pool.pending[0]) == set(blocks[:12]) and set(pool.pending[1]) == set(blocks[:11])
    assert len(caches.arriving) == 0


async def test_within_the_budget_rests_are_applied_together() -> None:
    caches = PreciseCaches(clock=lambda: 1.0, rest_budget=60.0)
    pool = trusted_pool(caches)
    blocks = tuple(identities(list(range(40)), 4))
    loop = asyncio.get_running_loop()
    for ticket in (1, 2, 3):  # tokenized to the end before they were routed
        loop.call_soon(caches.completed, "p", ticket, blocks[:5])
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert sorted(pool.rests) == [1, 2, 3]


async def test_queued_rests_are_bounded_and_dropped_oldest_first() -> None:
    caches = PreciseCaches(clock=lambda: 1.0, rest_budget=0.0)
    pool = trusted_pool(caches)
    blocks = tuple(identities(list(range(40)), 4))
    for ticket in range(1, 2 * 256 + 1):  # all queued in this iteration, never claimed
        caches.completed("p", ticket, blocks[:5])
    assert len(caches.arriving) == 256
    for _ in range(256):  # one rest per loop iteration
        await asyncio.sleep(0)
    assert len(caches.arriving) == 0
    assert list(pool.rests) == list(range(257, 2 * 256 + 1))


async def test_an_item_that_fails_is_reported_and_the_ones_after_it_still_applied() -> None:
    """Unpaced, a rest whose apply raised was one failed loop callback (logged by the loop)
    and the next rest ran in its own; a drain that raised left itself scheduled forever, so
    no later rest of the replica was ever applied again."""
    applied: list[int] = []

    def apply(item: int) -> None:
        if item == 2:
            raise ValueError("a broken rest")
        applied.append(item)

    loop = asyncio.get_running_loop()
    failures: list[object] = []
    loop.set_exception_handler(lambda _, context: failures.append(context.get("exception")))
    try:
        paced: Paced[int] = Paced(apply, 256, budget=0.0)
        for item in range(1, 5):
            paced.put(item)
        for _ in range(8):
            await asyncio.sleep(0)
        paced.put(5)  # a later one, queued after the failure
        for _ in range(4):
            await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert applied == [1, 3, 4, 5] and len(paced) == 0
    assert [type(failure) for failure in failures] == [ValueError]

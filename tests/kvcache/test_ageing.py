"""What a worker will still hold when a request runs: the blocks it must compute first, past
its capacity, evict as many of its least recently used blocks, tail first."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.kvcache.ageing import WorkerAges, _by_touch
from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.kvcache.pending import PENDING_TTL_S, expect, expire
from kinference.kvcache.pool import PoolCaches, Request
from kinference.kvcache.precise import PreciseCaches
from kinference.kvevents.events import BlockRemoved, BlockStored
from kinference.kvevents.trust import WorkerTrust
from kinference.routing.decision import LocalChoice
from tests.kvcache.per_block_ages import numbered, resolved


def test_nothing_to_evict_keeps_everything() -> None:
    ages = WorkerAges()
    ages.touch([1, 2, 3])
    assert ages.surviving([1, 2, 3], 3, 0) == 3
    assert ages.surviving([1, 2, 3], 3, -5) == 3


def test_least_recently_used_go_first_and_a_run_from_its_tail() -> None:
    ages = WorkerAges()
    ages.touch([10, 11, 12, 13])  # another prompt, used first
    ages.touch([1, 2, 3, 4])  # ours, stored once
    ages.touch([1, 2])  # its head used again since (a shared system prompt)
    blocks = [1, 2, 3, 4]
    assert ages.surviving(blocks, 4, 4) == 4  # the other prompt goes
    assert ages.surviving(blocks, 4, 5) == 3  # then our tail, from its last block
    assert ages.surviving(blocks, 4, 6) == 2
    assert ages.surviving(blocks, 4, 7) == 1  # the head was used last: it goes last
    assert ages.surviving(blocks, 4, 8) == 0
    assert ages.surviving(blocks, 1, 6) == 1


def test_removed_blocks_leave_the_order() -> None:
    ages = WorkerAges()
    ages.touch([10, 11])
    ages.touch([1, 2])
    ages.removed([10, 11, 99])  # evicted (99: never seen)
    assert numbered(ages.live) == {2: 2}
    assert ages.surviving([1, 2], 2, 1) == 1


def test_a_touch_whose_head_was_used_again_keeps_its_tail_in_order() -> None:
    ages = WorkerAges()
    ages.touch([1, 2, 3, 4, 5, 6])  # a document's blocks, stored
    ages.touch([20, 21])
    ages.touch([1, 2])  # its head used again by another request
    blocks = [1, 2, 3, 4, 5, 6]
    # Eviction order: 6, 5, 4, 3 (the old touch, from its end), 21, 20, then 2, 1.
    assert [ages.surviving(blocks, 6, n) for n in range(9)] == [6, 5, 4, 3, 2, 2, 2, 1, 0]
    ages.removed([6])  # evicted meanwhile: the rest of its touch moves up
    assert [ages.surviving(blocks, 5, n) for n in range(4)] == [5, 4, 3, 2]


def test_pool_caches_learn_the_capacity_and_evict_for_the_requests_ahead() -> None:
    pool = PoolCaches("p", 4, clock=lambda: 0.0)
    pool.trust[0] = pool.trust[1] = WorkerTrust(5.0, 10.0)
    tokens, other = list(range(16)), list(range(100, 116))
    blocks = identities(tokens, 4)
    pool.apply(0, [BlockStored((1, 2, 3, 4), None, tuple(tokens), 4)])
    assert pool.capacity is None and pool.surviving(0, blocks, 4) == 4  # never evicted
    pool.apply(1, [BlockStored((9, 10, 11, 12), None, tuple(other), 4)])
    pool.apply(1, [BlockRemoved((12,))])  # worker 1 evicted at 4 blocks: caches hold 4
    assert pool.capacity == 4
    assert pool.surviving(0, blocks, 4) == 4  # worker 0 is full but computes nothing next
    # A request routed to worker 0 will compute 2 new blocks first: 2 of ours must go.
    prompt = PromptBlocks(9, 4, tuple(identities(list(range(50, 59)), 4)))
    pool.sent(0, prompt, 0, Request(1, 0, 0.0))
    assert len(pool.pending[0]) == 2
    assert pool.surviving(0, blocks, 4) == 2
    # A request matching 3 of ours, behind it, finds 2 of them and computes the other two
    # again (evicting the first request's blocks): a request after both finds ours.
    pool.sent(0, PromptBlocks(17, 4, tuple(blocks)), 3, Request(2, 0, 0.0))
    assert pool.surviving(0, blocks, 3) == 3
    pool.finished(0, 2)  # it ended (never ran, in this test): only the first is ahead
    assert pool.surviving(0, blocks, 3) == 2


def test_the_unnamed_rest_of_a_lazy_prompt_counts_until_it_is_named() -> None:
    caches = PreciseCaches(clock=lambda: 0.0)
    pool = caches.pools["p"] = PoolCaches("p", 4, clock=lambda: 0.0)
    pool.trust[0] = WorkerTrust(5.0, 10.0)
    tokens = list(range(16))
    blocks = identities(tokens, 4)
    pool.apply(0, [BlockStored((1, 2, 3, 4), None, tuple(tokens), 4)])
    pool.apply(0, [BlockRemoved((4,)), BlockStored((5,), 3, tuple(tokens[12:]), 4)])
    assert pool.capacity == 4 and pool.surviving(0, blocks, 4) == 4
    # A long prompt tokenized only as far as its first block: ~3 more blocks to come.
    lazy = PromptBlocks(17, 4, tuple(identities(list(range(50, 54)), 4)), exact=False, ticket=7)
    caches.routed("p", 0, 0, lazy, key=1)
    assert pool.queues[0].requests[1].unnamed == 3 and len(pool.pending[0]) == 1
    assert pool.surviving(0, blocks, 4) == 0  # 4 blocks to compute: all of ours go
    caches.completed("p", 7, tuple(identities(list(range(50, 66)), 4)))
    assert pool.queues[0].requests[1].unnamed == 0 and len(pool.pending[0]) == 4
    assert pool.surviving(0, blocks, 4) == 0


def _full_pool(now: list[float]) -> tuple[PreciseCaches, PoolCaches, list[int]]:
    """A pool whose worker 0 holds one 4-block prompt and has learned it holds 4 at most."""
    caches = PreciseCaches(clock=lambda: now[0])
    pool = caches.pools["p"] = PoolCaches("p", 4, clock=lambda: now[0])
    pool.trust[0] = WorkerTrust(5.0, 10.0)
    tokens = list(range(16))
    pool.apply(0, [BlockStored((1, 2, 3, 4), None, tuple(tokens), 4)])
    pool.apply(0, [BlockRemoved((4,)), BlockStored((5,), 3, tuple(tokens[12:]), 4)])
    return caches, pool, identities(tokens, 4)


def test_a_lazy_prompts_rest_counts_only_its_blocks_the_worker_does_not_hold() -> None:
    # Seen on Dynamo's mockers: a lazy prompt's rest names it from its first block, held
    # there already; those blocks stayed pending forever (no event stores them again), so
    # every later request there was predicted to evict blocks the engine then hit.
    now = [0.0]
    caches, pool, _ = _full_pool(now)
    tokens = [*range(12), *range(60, 72)]  # 3 of the held blocks, then 3 new ones
    blocks = identities(tokens, 4)
    caches.routed("p", 0, 3, PromptBlocks(25, 4, tuple(blocks[:3]), exact=False, ticket=9))
    caches.completed("p", 9, tuple(blocks))
    assert set(pool.pending[0]) == set(blocks[3:])
    pool.apply(0, [BlockRemoved((5,)), BlockStored((6, 7, 8), 3, tuple(tokens[12:]), 4)])
    assert not pool.pending[0]  # stored: nothing more to come


def test_a_rest_tokenized_after_its_blocks_were_stored_is_not_pending() -> None:
    now = [0.0]
    caches, pool, _ = _full_pool(now)
    tokens = list(range(100, 116))
    blocks = identities(tokens, 4)
    caches.routed("p", 0, 0, PromptBlocks(17, 4, tuple(blocks[:1]), exact=False, ticket=3))
    pool.apply(0, [BlockStored((9, 10, 11, 12), None, tuple(tokens), 4)])  # ran already
    caches.completed("p", 3, tuple(blocks))
    assert not pool.pending[0]


def test_blocks_whose_events_never_come_stop_matching_after_the_ttl() -> None:
    now = [0.0]
    caches, pool, _ = _full_pool(now)
    blocks = identities(list(range(200, 216)), 4)
    caches.routed("p", 0, 0, PromptBlocks(17, 4, tuple(blocks)), key=1)  # never stored
    assert pool.extend(0, blocks, 0, now[0]) == 4
    now[0] = 10.0
    pool.expect(0, identities(list(range(300, 308)), 4), now[0])  # another, later
    assert len(pool.pending[0]) == 6
    now[0] = PENDING_TTL_S + 1.0  # the first request's blocks expired, not the second's
    assert pool.extend(0, blocks, 0, now[0]) == 0
    pool.expect(0, [], now[0])
    assert len(pool.pending[0]) == 2


def test_a_block_expected_again_is_pending_from_then_on() -> None:
    waiting: dict[int, float] = {}
    waiting = expect(waiting, [1, 2, 3], {}, 0.0)
    waiting = expect(waiting, [1], {2: 1}, 20.0)  # 2 held: not expected again
    expire(waiting, PENDING_TTL_S + 5.0)
    assert waiting == {1: 20.0}


def test_a_request_runs_from_its_first_token_and_leaves_the_queue_when_released() -> None:
    now = [0.0]
    caches, pool, ours = _full_pool(now)
    choice = LocalChoice("e", 0, "p", "m", prompt_tokens=17, predicted_cached_tokens=16)
    caches.routed("p", 0, 4, PromptBlocks(17, 4, tuple(ours)), key=id(choice), output_tokens=8)
    queued = pool.queues[0].requests[id(choice)]
    assert (queued.decode, queued.running) == (2, False)  # (1 + 8) tokens: 2 full blocks
    caches.served(choice)
    assert queued.running
    other = identities(list(range(500, 508)), 4)
    pool.apply(0, [BlockRemoved((5, 3)), BlockStored((20, 21), None, tuple(range(500, 508)), 4)])
    caches.released(choice)  # ours are freed after the other two were stored: used last
    assert not pool.queues[0].requests
    pool.sent(
        0, PromptBlocks(9, 4, tuple(identities(list(range(600, 609)), 4))), 0, Request(1, 0, 0.0)
    )
    assert pool.surviving(0, other, 2) == 0 and pool.surviving(0, ours, 2) == 2


class _CountedAges:
    """The bookkeeping of `WorkerAges` as it was written first (a Counter over a generator):
    the reference its numpy form must match."""

    def __init__(self) -> None:
        self.touched: dict[int, int] = {}
        self.live: dict[int, int] = {}
        self.evicted: dict[int, int] = {}
        self.touches = 0

    def touch(self, blocks: list[int]) -> None:
        named = dict.fromkeys(blocks)
        if not named:
            return
        self._release([self.touched.get(b) for b in named])
        self.touches += 1
        base = self.touches << 24
        self.touched.update(zip(named, range(base + len(named) - 1, base - 1, -1), strict=True))
        self.live[self.touches] = len(named)

    def removed(self, blocks: list[int]) -> None:
        self._release([self.touched.pop(b, None) for b in blocks], evicted=True)

    def _release(self, keys: list[int | None], evicted: bool = False) -> None:
        for touch, count in Counter(k >> 24 for k in keys if k is not None).items():
            left = self.live.get(touch, 0) - count
            if left > 0:
                self.live[touch] = left
                if evicted:
                    self.evicted[touch] = self.evicted.get(touch, 0) + count
            else:
                self.live.pop(touch, None)
                self.evicted.pop(touch, None)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, 40), max_size=30)), max_size=30))
def test_touches_and_removals_count_as_the_reference_does(
    steps: list[tuple[bool, list[int]]],
) -> None:
    ages, reference = WorkerAges(), _CountedAges()
    for remove, blocks in steps:
        if remove:
            ages.removed(blocks)
            reference.removed(blocks)
        else:
            ages.touch(blocks)
            reference.touch(blocks)
        assert (resolved(ages), numbered(ages.live), numbered(ages.evicted)) == (
            reference.touched,
            reference.live,
            reference.evicted,
        )


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 90), st.integers(1, 40)), max_size=120))
def test_blocks_leaving_are_counted_by_touch_as_a_counter_does(
    runs: list[tuple[int, int]],
) -> None:
    """Counted run by run (a touch's blocks come in runs), or sorted past `_MAX_RUNS` runs
    (up to 120 here): the same counts either way."""
    touches = np.array([touch for touch, length in runs for _ in range(length)], dtype=np.int64)
    assert dict(_by_touch(touches)) == Counter(touches.tolist())

"""What a worker will still hold when a request runs: the blocks it must compute first, past
its capacity, evict as many of its least recently used blocks, tail first."""

from __future__ import annotations

from kinference.kvcache.ageing import WorkerAges
from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.kvcache.precise import PoolCaches, PreciseCaches
from kinference.kvevents.events import BlockRemoved, BlockStored
from kinference.kvevents.trust import WorkerTrust


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
    assert ages.live == {2: 2}
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


def test_pool_caches_learn_the_capacity_and_evict_for_the_pending_blocks() -> None:
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
    pool.sent(0, prompt, 0, 0.0)
    assert len(pool.pending[0]) == 2
    assert pool.surviving(0, blocks, 4) == 2
    # A request matching 3 of ours (the 4th predicted gone: pending again) uses them
    # again: the 4th goes, then 2 from the tail of the 3.
    pool.sent(0, PromptBlocks(17, 4, tuple(blocks)), 3, 0.0)
    assert len(pool.pending[0]) == 3
    assert pool.surviving(0, blocks, 3) == 1


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
    caches.routed("p", 0, 0, lazy)
    assert pool.unnamed[0] == 3 and len(pool.pending[0]) == 1
    assert pool.surviving(0, blocks, 4) == 0  # 4 blocks to compute: all of ours go
    caches.completed("p", 7, tuple(identities(list(range(50, 66)), 4)[1:]))
    assert pool.unnamed[0] == 0 and len(pool.pending[0]) == 4
    assert pool.surviving(0, blocks, 4) == 0

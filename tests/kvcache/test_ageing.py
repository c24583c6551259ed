"""What a worker will still hold when a request runs: blocks last used longer ago than the
worker's eviction age, minus the queue wait, count as gone."""

from __future__ import annotations

from kinference.kvcache.ageing import WorkerAges
from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.kvcache.precise import PoolCaches
from kinference.kvevents.events import BlockRemoved, BlockStored
from kinference.kvevents.trust import WorkerTrust


def test_a_worker_that_does_not_evict_keeps_everything() -> None:
    ages = WorkerAges()
    ages.touch([1, 2, 3], 0.0)
    assert ages.surviving([1, 2, 3], 3, 1000.0, 50.0) == 3


def test_old_blocks_do_not_survive_the_wait() -> None:
    ages = WorkerAges()
    ages.touch([100, 101], 0.0)
    ages.removed([100, 101], 10.0)  # evicted 10 s after their last use
    assert ages.eviction_age_s == 10.0
    ages.touch([1, 2], 12.0)  # a prefix used at 12 s ...
    ages.touch([3, 4], 5.0)  # ... whose tail was last used at 5 s (engines evict tails first)
    blocks = [1, 2, 3, 4]
    assert ages.surviving(blocks, 4, 13.0, 0.0) == 4  # tail 8 s old: survives a 0 s wait
    assert ages.surviving(blocks, 4, 13.0, 3.0) == 2  # not a 3 s wait
    assert ages.surviving(blocks, 4, 13.0, 20.0) == 0
    assert ages.surviving(blocks, 1, 13.0, 3.0) == 1


def test_the_queue_wait_is_the_oldest_unstored_request() -> None:
    ages = WorkerAges()
    pending = {7: 1.0, 8: 2.0}
    ages.routed(7, 1.0)
    ages.routed(8, 2.0)
    ages.routed(None, 2.5)  # a full hit stores nothing: it does not wait
    assert ages.wait_s(pending, 4.0, 30.0) == 3.0
    del pending[7]  # stored: its request has run
    assert ages.wait_s(pending, 4.0, 30.0) == 2.0
    assert ages.wait_s(pending, 40.0, 30.0) == 0.0  # expired


def test_pool_caches_predict_evictions_from_the_events() -> None:
    now = [0.0]
    pool = PoolCaches("p", 4, clock=lambda: now[0], predict_evictions=True)
    pool.trust[0] = WorkerTrust(5.0, 10.0)
    tokens = list(range(16))
    blocks = identities(tokens, 4)
    pool.apply(0, [BlockStored((1, 2, 3, 4), None, tuple(tokens), 4)])
    other = list(range(100, 108))
    pool.apply(0, [BlockStored((9, 10), None, tuple(other), 4)])
    now[0] = 6.0
    pool.apply(0, [BlockRemoved((9, 10))])  # blocks survive ~6 s there
    assert pool.surviving(0, blocks, 4, 7.0) == 0  # ours are 7 s old
    prompt = PromptBlocks(33, 4, tuple(identities(tokens + list(range(50, 67)), 4)))
    pool.sent(0, prompt, 4, 7.0)  # a request used them now, and waits to store 4 more
    assert pool.surviving(0, blocks, 4, 8.0) == 4
    assert set(prompt.blocks[4:8]) <= set(pool.pending[0])
    assert pool.surviving(0, blocks, 4, 12.0) == 0  # 5 s since use + 5 s in the queue > 6 s

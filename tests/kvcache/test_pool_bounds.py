"""What a precise pool keeps per worker stays within what the worker holds, under hostile
and unusual streams: a publisher that never removes (past the index's bound), a cache
cleared without a restart (`AllBlocksCleared`), and workers coming and going."""

from __future__ import annotations

import itertools
import random

import pytest

from kinference.kvcache import index as index_module
from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.kvcache.index import BlockIndex
from kinference.kvcache.pool import PoolCaches, Request
from kinference.kvevents.events import AllBlocksCleared, BlockRemoved, BlockStored
from kinference.kvevents.trust import WorkerTrust

BS = 4


def _stored(hashes: itertools.count[int], tokens: list[int]) -> BlockStored:
    count = len(tokens) // BS
    return BlockStored(tuple(next(hashes) for _ in range(count)), None, tuple(tokens), BS)


def _aged(pool: PoolCaches, slot: int) -> set[int]:
    ages = pool.ages.get(slot)
    return set(ages.touched) if ages is not None else set()


def test_blocks_past_the_bound_are_neither_held_nor_aged() -> None:
    """A publisher that stores and never removes: the index keeps `max_blocks_per_worker`
    blocks and counts the rest as skipped; the eviction order knows only the kept ones (it
    grew with every block announced), in one bulk batch and block by block."""
    pool = PoolCaches("p", BS, index=BlockIndex(max_blocks_per_worker=100))
    hashes, rng = itertools.count(1), random.Random(7)
    for _ in range(40):
        tokens = [rng.randrange(1000) for _ in range(BS * rng.randint(1, 30))]
        pool.apply(0, [_stored(hashes, tokens)])
    held = set(pool.index.held(0))
    assert len(held) == 100
    assert _aged(pool, 0) == held
    assert pool.index.orphans(0) > 0


def test_a_full_index_names_no_block_it_will_not_keep(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of 10k blocks into an index with room for 30: only the 30 are named (block
    identities computed), the rest counted as skipped; a hash stored again takes no room."""
    named: list[int] = []

    def counted(tokens: object, *args: object, **kwargs: object) -> list[int]:
        result = identities(tokens, *args, **kwargs)  # type: ignore[arg-type]
        named.append(len(result))
        return result

    monkeypatch.setattr(index_module, "identities", counted)
    pool, hashes = (
        PoolCaches("p", BS, index=BlockIndex(max_blocks_per_worker=100)),
        itertools.count(1),
    )
    pool.apply(0, [_stored(hashes, list(range(70 * BS)))])
    again = tuple(range(1, 71))  # the same 70 blocks, under the same hashes, then 10k new
    tokens = tuple(range(70 * BS)) + tuple(range(100_000, 100_000 + 10_000 * BS))
    pool.apply(0, [BlockStored(again + tuple(range(1000, 11_000)), None, tokens, BS)])
    assert named == [70, 100]
    assert pool.index.blocks(0) == 100 and pool.index.orphans(0) == 10_000 - 30
    assert len(pool.ages[0].touched) == 100


def test_a_cleared_cache_is_not_aged() -> None:
    """`AllBlocksCleared` (vLLM's `reset_prefix_cache`, no restart): the blocks stored
    before it are not ranked for eviction any more; those stored after it in the same
    batch are."""
    pool, hashes = PoolCaches("p", BS), itertools.count(1)
    pool.apply(0, [_stored(hashes, list(range(40)))])
    after = list(range(100, 140))
    pool.apply(
        0, [_stored(hashes, list(range(200, 240))), AllBlocksCleared(), _stored(hashes, after)]
    )
    assert set(pool.index.held(0)) == set(identities(after, BS))
    assert _aged(pool, 0) == set(identities(after, BS))
    pool.apply(0, [AllBlocksCleared()])
    assert _aged(pool, 0) == set() and pool.index.blocks(0) == 0


def test_blocks_stored_then_cleared_in_one_batch_are_not_pending() -> None:
    """A request's blocks were pending; the batch stores them, then clears the cache: they
    are no longer about to be stored (they were), nor held."""
    pool, hashes = PoolCaches("p", BS), itertools.count(1)
    tokens = list(range(40))
    pool.expect(0, identities(tokens, BS), 0.0)
    pool.apply(0, [_stored(hashes, tokens), AllBlocksCleared()])
    assert pool.pending[0] == {} and pool.index.blocks(0) == 0


def test_a_clear_is_not_an_eviction() -> None:
    """A cleared cache says nothing of its size: capacity is learned from evictions only."""
    pool, hashes = PoolCaches("p", BS), itertools.count(1)
    pool.apply(0, [_stored(hashes, list(range(40)))])
    pool.apply(0, [AllBlocksCleared()])
    assert pool.capacity is None
    pool.apply(0, [_stored(hashes, list(range(40)))])
    pool.apply(0, [BlockRemoved((next(hashes) - 1,))])
    assert pool.capacity == 10


def test_nothing_is_kept_for_workers_scaled_away() -> None:
    """Workers appear, hold blocks, get requests, and go (`forget`, as `PreciseEvents` does
    when an endpoint leaves): no per-worker state of theirs is left behind."""
    pool, hashes, rng = PoolCaches("p", BS), itertools.count(1), random.Random(3)
    for slot in range(200):
        pool.trust[slot] = WorkerTrust(5.0, 5.0)
        tokens = [rng.randrange(1000) for _ in range(BS * 20)]
        pool.apply(slot, [_stored(hashes, tokens[: BS * 10])])
        prompt = PromptBlocks(len(tokens), BS, tuple(identities(tokens, BS)))
        pool.sent(slot, prompt, 10, Request(slot + 1, 16, 0.0))
        pool.index.longest(prompt.blocks, [slot])
        pool.trust.pop(slot)
        pool.forget(slot)
    per_slot = (pool.pending, pool.ages, pool.queues, pool.peaks, pool.trust, pool.endpoints)
    assert [len(kept) for kept in per_slot] == [0] * len(per_slot)
    assert pool.index.holdings() == {}


def test_a_rest_due_to_a_worker_gone_is_not_expected_on_its_slots_next_worker() -> None:
    """A lazily tokenized prompt went to slot 0; the request ended, its worker left and its
    slot went to a new worker (`routing.slots` reuses freed slots) before the rest of the
    prompt was tokenized. Before, the rest was expected on the new worker (its blocks
    pending there, a queue entry named): claims and tickets outlived `forget`."""
    pool, tokens = PoolCaches("p", BS), list(range(BS * 12))
    blocks = tuple(identities(tokens, BS))
    pool.trust[0] = WorkerTrust(5.0, 5.0)
    head = PromptBlocks(len(tokens), BS, blocks[:2], exact=False, ticket=7)
    pool.sent(0, head, 0, Request(1, 16, 0.0))
    pool.claim(7, 0, 0.0)
    pool.finished(0, 1)
    pool.trust.pop(0)  # the worker leaves (`PreciseEvents._stop`) ...
    pool.forget(0)
    pool.trust[0] = WorkerTrust(5.0, 5.0)  # ... and a new one takes its slot
    pool.complete(7, blocks, 1.0)
    assert 0 not in pool.pending and not pool.claims and not pool.tickets


def test_a_block_whose_hash_names_another_now_is_not_aged() -> None:
    """An engine hash stored again for other tokens (a publisher reusing hashes): the block
    it named left the worker, and leaves the eviction order with it."""
    pool = PoolCaches("p", BS)
    pool.apply(0, [BlockStored((1, 2), None, tuple(range(8)), BS)])
    pool.apply(0, [BlockStored((2,), 1, tuple(range(50, 54)), BS)])
    held = set(pool.index.held(0))
    assert len(held) == 2 and _aged(pool, 0) == held

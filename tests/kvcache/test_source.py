"""The precise source for issue 13's cached-tokens seam: precise where trusted, else the
approximate source's answer."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.kvcache.pool import PoolCaches
from kinference.kvcache.precise import PreciseCaches, PreciseQuery
from kinference.kvcache.source import PreciseCachedTokens
from kinference.kvevents.events import BlockRemoved, BlockStored
from kinference.kvevents.trust import WorkerTrust
from tests.kvcache.trusted import trusted_pool


@dataclass(frozen=True)
class Query:
    pool: str
    precise: PreciseQuery | None
    output_tokens: int = 0


class Approximate:
    def cached_tokens(self, query: object, slots: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
        return np.full(len(slots), 7.0)


def test_precise_where_trusted_else_approximate() -> None:
    caches = PreciseCaches(clock=lambda: 0.0)
    pool = caches.pools["p"] = PoolCaches("p", 4)
    tokens = list(range(13))
    for slot in (0, 1):
        pool.trust[slot] = WorkerTrust(5.0, 10.0)
        pool.endpoints[slot] = f"e{slot}"
    pool.trust[0].on_batch(0, 0.0)  # slot 0 trusted; slot 1 has published nothing
    pool.index.apply(0, [BlockStored((1, 2, 3), None, tuple(tokens[:12]), 4)])
    prompt = PromptBlocks(13, 4, tuple(identities(tokens, 4)))
    source = PreciseCachedTokens(caches, Approximate())
    query = Query("p", PreciseQuery({"p": prompt}))
    assert source.cached_tokens(query, np.array([0, 1])).tolist() == [12.0, 7.0]
    assert source.cached_tokens(Query("p", None), np.array([0])).tolist() == [7.0]
    # A fully cached prompt: the engine recomputes the last token, so its block is no hit.
    exact = PromptBlocks(12, 4, tuple(identities(tokens[:12], 4)))
    query = Query("p", PreciseQuery({"p": exact}))
    assert source.cached_tokens(query, np.array([0])).tolist() == [8.0]


def test_blocks_routed_count_until_their_events_store_or_remove_them() -> None:
    now = [0.0]
    caches = PreciseCaches(clock=lambda: now[0])
    pool = caches.pools["p"] = PoolCaches("p", 4, predict_evictions=False)  # see test_ageing
    pool.trust[0] = WorkerTrust(5.0, 10.0)
    pool.trust[0].on_batch(0, 0.0)
    tokens = list(range(17))
    prompt = PromptBlocks(17, 4, tuple(identities(tokens, 4)))
    match = caches.match("p", prompt, [0])
    assert match is not None and match.blocks.tolist() == [0.0]
    caches.routed("p", 0, 0, prompt)  # queued there: its 4 blocks are on their way
    match = caches.match("p", prompt, [0])
    assert match is not None and match.blocks.tolist() == [4.0]
    pool.apply(0, [BlockStored((1, 2), None, tuple(tokens[:8]), 4)])
    pool.apply(0, [BlockRemoved((2,))])  # stored, then evicted: no longer pending either
    match = caches.match("p", prompt, [0])
    assert match is not None and match.blocks.tolist() == [1.0]
    now[0] = 100.0  # the rest never came: forgotten after the TTL
    pool.trust[0].on_batch(1, 100.0)
    pool.pending[0][prompt.blocks[0]] = 0.0
    match = caches.match("p", prompt, [0])
    assert match is not None and match.blocks.tolist() == [1.0]


def test_the_rest_of_a_lazy_prompt_is_pending_where_it_went_in_either_order() -> None:
    caches = PreciseCaches(clock=lambda: 1.0)
    pool = trusted_pool(caches)
    blocks = tuple(identities(list(range(40)), 4))
    head = PromptBlocks(40, 4, blocks[:2], exact=False, ticket=7)
    caches.routed("p", 1, 0, head)  # routed first, tokenized to the end later
    caches.completed("p", 7, blocks)
    assert set(pool.pending[1]) == set(blocks) and 0 not in pool.pending
    caches.completed("p", 8, blocks[:5])  # tokenized to the end before it was routed
    caches.routed("p", 0, 0, PromptBlocks(40, 4, blocks[:2], exact=False, ticket=8))
    assert set(pool.pending[0]) == set(blocks[:5])
    for ticket in range(100, 100 + 2 * 256):  # never claimed: bounded
        caches.completed("p", ticket, blocks)
    assert len(pool.rests) <= 256


def test_reach_is_the_longest_run_of_held_then_pending_blocks_of_one_worker() -> None:
    caches = PreciseCaches(clock=lambda: 1.0)
    pool = trusted_pool(caches)
    tokens = list(range(40))
    blocks = identities(tokens, 4)
    assert pool.reach()(blocks) == 0
    pool.apply(0, [BlockStored((1, 2, 3), None, tuple(tokens[:12]), 4)])
    assert pool.reach()(blocks) == 3
    pool.expect(1, blocks[3:6], 1.0)  # worker 1 lacks blocks 0-2: its run is empty
    assert pool.reach()(blocks) == 3
    pool.expect(0, blocks[3:6], 1.0)  # routed to worker 0, not stored yet
    assert pool.reach()(blocks) == 6
    # Followed as the prompt's blocks grow: a worker whose run ended is not asked again.
    reach = pool.reach()
    assert reach(blocks[:2]) == 2 and reach(blocks[:5]) == 5 and reach(blocks) == 6
    pool.expect(0, blocks[6:8], 1.0)
    assert reach(blocks) == 6  # its run had ended at 6
    assert pool.reach()(blocks) == 8


def test_the_query_gives_the_cost_model_the_prompt_tokens_of_the_pool() -> None:
    query = PreciseQuery({"p": PromptBlocks(5000, 16, (), exact=False)})
    assert query.prompt_tokens("p") == 5000 and query.prompt_tokens("other") is None


class ApproximateSays:
    def __init__(self, *tokens: float) -> None:
        self.tokens = tokens

    def cached_tokens(self, query: object, slots: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
        return np.array(self.tokens[: len(slots)])


def test_a_walk_stopped_at_its_bound_is_a_floor_the_approximate_index_may_raise() -> None:
    """A Pick's tokenization stopped by its time (`PromptBlocks.bounded`): a worker holding
    every block named may hold more, so it gets the approximate figure where that is higher;
    a worker whose run ended earlier keeps its precise count; a walk stopped where no worker
    held the prompt is a whole prediction."""
    caches = PreciseCaches(clock=lambda: 0.0)
    pool = trusted_pool(caches)
    tokens = list(range(400))
    blocks = identities(tokens, 4)
    pool.apply(0, [BlockStored((1, 2, 3), None, tuple(tokens[:12]), 4)])  # 3 of the 3 named
    pool.apply(1, [BlockStored((4, 5), None, tuple(tokens[:8]), 4)])  # 2 of the 3 named
    source = PreciseCachedTokens(caches, ApproximateSays(300.0, 300.0))
    slots = np.array([0, 1])

    def cached(**kind: bool) -> list[float]:
        prompt = PromptBlocks(400, 4, tuple(blocks[:3]), exact=False, ticket=1, **kind)
        return source.cached_tokens(Query("p", PreciseQuery({"p": prompt})), slots).tolist()

    assert cached(bounded=True) == [300.0, 8.0]
    assert cached(bounded=False) == [12.0, 8.0]
    source.approximate = ApproximateSays(4.0, 300.0)  # lower than the floor: the floor
    assert cached(bounded=True) == [12.0, 8.0]
    source.approximate = ApproximateSays(5000.0, 0.0)  # never past the prompt's last block
    assert cached(bounded=True) == [396.0, 8.0]

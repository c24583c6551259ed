"""A block the worker held when a request was routed there is not pending (no event stores it
again), unless the engine evicts it before that request runs: the request computes and stores
it again, so from the eviction on it is pending there like the rest of the request's blocks."""

from __future__ import annotations

from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.kvcache.pool import PoolCaches
from kinference.kvcache.precise import PreciseCaches
from kinference.kvevents.events import BlockRemoved, BlockStored
from kinference.kvevents.trust import WorkerTrust
from kinference.routing.decision import LocalChoice

HEADER = [1, 2, 3, 4]  # the chat template's first block, shared by every prompt
DOCUMENT = list(range(100, 128))  # 7 blocks of 4


def _pool() -> tuple[PreciseCaches, PoolCaches]:
    """Worker 0 (trusted) holds an earlier prompt's 2 blocks: the header and one of its own."""
    caches = PreciseCaches(clock=lambda: 0.0)
    pool = caches.pools["p"] = PoolCaches("p", 4, clock=lambda: 0.0)
    pool.trust[0] = WorkerTrust(5.0, 10.0)
    pool.trust[0].on_batch(0, 0.0)
    pool.apply(0, [BlockStored((1, 2), None, (*HEADER, 50, 51, 52, 53), 4)])
    return caches, pool


def _prompt(question: list[int]) -> PromptBlocks:
    tokens = [*HEADER, *DOCUMENT, *question]
    return PromptBlocks(len(tokens), 4, tuple(identities(tokens, 4)))


def _second(caches: PreciseCaches) -> float:
    """The cached blocks predicted on worker 0 for another question on the same document."""
    match = caches.match("p", _prompt([300, 301, 302, 303, 304]), [0])
    assert match is not None
    return float(match.blocks[0])


def test_a_held_block_evicted_before_its_request_runs_is_pending_again() -> None:
    # Seen on Dynamo's mockers under thrash (docs/benchmarks.md, h123 and h127): a document
    # routed to a worker that held only the prompts' shared first block, still queued there
    # when the engine evicted that block; the next request on the document was predicted
    # nothing there (its first block neither held nor pending), and found 5 168 tokens.
    caches, pool = _pool()
    first = _prompt([200, 201, 202, 203, 204])
    caches.routed("p", 0, 0, first, key=1)
    assert first.blocks[0] not in pool.pending[0]  # held: it will not be stored again
    assert _second(caches) == 8  # the header held, the document pending
    pool.apply(0, [BlockRemoved((1, 2))])  # evicted for other requests' blocks
    assert _second(caches) == 8  # was 0
    assert first.blocks[0] in pool.pending[0]  # the request will compute it again


def test_the_same_for_a_lazy_prompts_rest() -> None:
    caches, pool = _pool()
    first = _prompt([200, 201, 202, 203, 204])
    lazy = PromptBlocks(first.tokens, 4, first.blocks[:1], exact=False, ticket=3)
    caches.routed("p", 0, 1, lazy, key=1)
    caches.completed("p", 3, first.blocks[:9])
    pool.apply(0, [BlockRemoved((1,))])
    assert _second(caches) == 8


def test_not_once_the_request_runs_or_ended() -> None:
    # After it ran, the engine's eviction is for good: pending then, the block would be
    # predicted cached for 30 s while nothing stores it.
    caches, pool = _pool()
    first = _prompt([200, 201, 202, 203, 204])
    choice = LocalChoice("e", 0, "p", "m", prompt_tokens=first.tokens, predicted_cached_tokens=4)
    caches.routed("p", 0, 0, first, key=id(choice))
    pool.started(0, id(choice))
    pool.apply(0, [BlockRemoved((1,))])
    assert first.blocks[0] not in pool.pending[0]
    caches.routed("p", 0, 0, first, key=2)  # again, and it ended before the eviction
    pool.apply(0, [BlockStored((3,), None, tuple(HEADER), 4)])
    pool.finished(0, 2)
    assert not pool.reused.get(0)
    pool.apply(0, [BlockRemoved((3,))])
    assert first.blocks[0] not in pool.pending[0]


def test_not_when_the_same_batch_stores_it_again() -> None:
    caches, pool = _pool()
    first = _prompt([200, 201, 202, 203, 204])
    caches.routed("p", 0, 0, first, key=1)
    pool.apply(0, [BlockRemoved((1, 2)), BlockStored((7,), None, tuple(HEADER), 4)])
    assert first.blocks[0] not in pool.pending[0]
    assert _second(caches) == 8

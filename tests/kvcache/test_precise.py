"""`PreciseCaches.served`: when a request's first token says its blocks' events are due."""

from __future__ import annotations

from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.kvcache.pool import PoolCaches
from kinference.kvcache.precise import PreciseCaches
from kinference.kvevents.events import BlockStored
from kinference.kvevents.trust import Distrust, WorkerTrust
from kinference.routing.decision import LocalChoice

TOKENS = list(range(100, 117))  # 4 full blocks of 4, and 1 token


def _routed(now: list[float]) -> tuple[PreciseCaches, PoolCaches, WorkerTrust, LocalChoice]:
    """Worker 0 trusted (its batch 0 came), then sent a prompt it holds none of."""
    caches = PreciseCaches(clock=lambda: now[0])
    pool = caches.pools["p"] = PoolCaches("p", 4, clock=lambda: now[0])
    trust = pool.trust[0] = WorkerTrust(stall_after_s=5.0, resync_after_s=10.0)
    trust.on_batch(0, now[0])
    choice = LocalChoice("e", 0, "p", "m", prompt_tokens=17, predicted_cached_tokens=0)
    blocks = PromptBlocks(17, 4, tuple(identities(TOKENS[:16], 4)))
    caches.routed("p", 0, 0, blocks, key=id(choice))
    return caches, pool, trust, choice


def test_events_that_came_before_the_first_token_leave_an_idle_engine_trusted() -> None:
    # Seen on Dynamo's mockers: the engine publishes a prompt's blocks as the step that
    # made its first token ends, straight to us; the token's report comes after, through
    # the caller. The worker was then marked waiting for events already applied, and an
    # engine idle for stall_after_s after that one request was taken for a stalled one.
    now = [0.0]
    caches, pool, trust, choice = _routed(now)
    now[0] = 0.1
    trust.on_batch(1, now[0])
    pool.apply(0, [BlockStored((1, 2, 3, 4), None, tuple(TOKENS[:16]), 4)])
    now[0] = 0.2
    caches.served(choice)
    assert trust.trusted(6.0) and trust.trusted(60.0)


def test_events_still_due_at_the_first_token_make_a_stall_if_they_never_come() -> None:
    now = [0.0]
    caches, pool, trust, choice = _routed(now)
    now[0] = 0.2
    caches.served(choice)
    assert trust.trusted(5.1)
    assert not trust.trusted(5.3) and trust.distrust is Distrust.STALLED
    trust.on_batch(1, 6.0)  # they came late: trusted again
    pool.apply(0, [BlockStored((1, 2, 3, 4), None, tuple(TOKENS[:16]), 4)])
    assert trust.trusted(6.0)


def test_a_request_the_worker_stored_only_partly_still_waits_for_the_rest() -> None:
    now = [0.0]
    caches, pool, trust, choice = _routed(now)
    trust.on_batch(1, 0.1)  # a first chunk of the prompt (chunked prefill)
    pool.apply(0, [BlockStored((1, 2), None, tuple(TOKENS[:8]), 4)])
    caches.served(choice)
    assert not trust.trusted(5.5) and trust.distrust is Distrust.STALLED

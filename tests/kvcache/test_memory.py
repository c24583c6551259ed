"""Whether a request fits in a worker's KV cache beside the requests ahead there, or how
many of them must end first (`kvcache.memory`), and the pool's answer per candidate."""

from __future__ import annotations

from kinference.kvcache.blocks import PromptBlocks
from kinference.kvcache.memory import FITS, Room, room
from kinference.kvcache.pool import PoolCaches, Request
from kinference.kvcache.queue import EngineQueue, Queued


def _queue(*requests: Queued) -> EngineQueue:
    queue = EngineQueue()
    for key, request in enumerate(requests):
        queue.add(key, request)
    return queue


def test_unknown_capacity_or_nothing_ahead_fits() -> None:
    assert room(None, 100, (1, 2), 0) == FITS
    assert room(_queue(Queued((1,), 0, 0, 0.0)), None, (1, 2), 0) == FITS
    assert room(EngineQueue(), 100, (1, 2), 0) == FITS


def test_room_enough_runs_beside_everything_ahead() -> None:
    queue = _queue(Queued((1, 2), 0, 1, 0.0), Queued((3,), 0, 1, 0.0))
    assert room(queue, 10, (4, 5), 1) == Room(0, 3)


def test_blocks_shared_with_the_requests_ahead_count_once() -> None:
    shared = tuple(range(6))
    queue = _queue(Queued(shared, 0, 0, 0.0), Queued((*shared, 6), 0, 0, 0.0))
    assert room(queue, 8, (*shared, 7), 0) == Room(0, 3)  # 8 distinct blocks


def test_the_oldest_requests_ahead_must_end_first() -> None:
    queue = _queue(
        Queued(tuple(range(0, 6)), 0, 0, 0.0),
        Queued(tuple(range(10, 14)), 0, 0, 0.0),
        Queued(tuple(range(20, 22)), 0, 1, 0.0),
    )
    # 5 of ours + 3 of the newest = 8; with the middle one 12 > 10: the first two end first
    assert room(queue, 10, tuple(range(30, 34)), 1) == Room(2, 2)
    # a request that fills the cache alone waits for all of them
    assert room(queue, 10, tuple(range(30, 41)), 0) == Room(3, 1)


def test_unnamed_and_output_blocks_take_room() -> None:
    queue = _queue(Queued((1, 2), 3, 2, 0.0))  # 2 named, 3 to name, 2 of output
    assert room(queue, 9, (4,), 1) == Room(0, 2)
    assert room(queue, 9, (4,), 2) == Room(1, 1)


def test_a_pool_answers_once_it_knows_the_cache_size() -> None:
    caches = PoolCaches("p", 4)
    prompt = PromptBlocks(4 * 6 + 2, 4, tuple(range(100, 106)))  # 6 blocks, 2 tokens more
    ahead = PromptBlocks(4 * 5, 4, tuple(range(5)))
    caches.sent(0, ahead, 0, Request(1, 0, 0.0))
    assert caches.room(0, prompt, 8) == FITS  # no engine evicted yet: size unknown
    caches.capacity = 10
    assert caches.room(0, prompt, 8) == Room(1, 1)  # 6 + (2 + 8) // 4 = 8 blocks, 5 ahead
    assert caches.room(1, prompt, 8) == FITS  # nothing in flight there
    caches.finished(0, 1)
    assert caches.room(0, prompt, 8) == FITS

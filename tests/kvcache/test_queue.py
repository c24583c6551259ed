"""The engine's queue, replayed: what a request sent now finds when the requests ahead have
run first, in order, each evicting least recently used blocks for what it computes."""

from __future__ import annotations

import pytest

from kinference.kvcache import replan as replan_module
from kinference.kvcache.ageing import WorkerAges
from kinference.kvcache.queue import QUEUE_TTL_S, EngineQueue, Queued, survivors


def _worker(*touches: list[int]) -> tuple[WorkerAges, dict[int, int]]:
    """A worker holding each touch's blocks, oldest touch first."""
    ages = WorkerAges()
    held: dict[int, int] = {}
    for blocks in touches:
        ages.touch(blocks)
        held.update(dict.fromkeys(blocks, 1))
    return ages, held


def _survivors(queue: EngineQueue, ages: WorkerAges, held: dict[int, int], room: int) -> int:
    return survivors(queue, ages, held=held, room=room, blocks=[1, 2, 3, 4], depth=4)


def test_nothing_ahead_or_room_enough_keeps_the_match() -> None:
    ages, held = _worker([1, 2, 3, 4], [10, 11])
    queue = EngineQueue()
    assert _survivors(queue, ages, held, 0) == 4
    queue.add(1, Queued((20, 21), 0, 1, 0.0))
    assert _survivors(queue, ages, held, 3) == 4  # its 3 blocks fit in the room left


def test_a_waiting_request_evicts_the_oldest_first_tail_first() -> None:
    ages, held = _worker([1, 2, 3, 4], [10, 11])  # ours are the oldest
    queue = EngineQueue()
    queue.add(1, Queued((20, 21), 0, 0, 0.0))
    assert _survivors(queue, ages, held, 0) == 2  # our tail goes first
    queue.add(2, Queued((22,), 2, 0, 0.0))  # another, with 2 blocks not named yet
    assert _survivors(queue, ages, held, 0) == 0


def test_output_blocks_count_as_computed() -> None:
    ages, held = _worker([1, 2, 3, 4], [10, 11])
    queue = EngineQueue()
    queue.add(1, Queued((10, 11), 0, 3, 0.0))  # running: its prompt held, 3 blocks of output
    queue.started(1)
    assert _survivors(queue, ages, held, 0) == 1


def test_blocks_a_request_ahead_uses_are_kept_or_computed_again() -> None:
    ages, held = _worker([1, 2, 3, 4], [10, 11])
    queue = EngineQueue()
    queue.add(1, Queued((1, 2), 0, 0, 0.0))  # running: it uses our first two
    queue.started(1)
    queue.add(2, Queued((30, 31, 32, 33), 0, 0, 0.0))  # evicts 3, 4, then 10, 11
    assert _survivors(queue, ages, held, 0) == 2
    queue.add(3, Queued((1, 2, 3, 4, 40), 0, 0, 0.0))  # recomputes 3 and 4: we find them
    assert _survivors(queue, ages, held, 2) == 4
    queue.finish(3)
    assert _survivors(queue, ages, held, 2) == 2


def test_when_no_older_block_is_left_the_requests_ahead_lose_theirs_oldest_first() -> None:
    ages, held = _worker([1, 2, 3, 4])
    queue = EngineQueue()
    queue.add(1, Queued((1, 2, 3, 4), 0, 0, 0.0))  # ours, in use
    queue.started(1)
    queue.add(2, Queued((50, 51, 52), 0, 0, 0.0))  # nothing older to evict: our tail goes
    assert _survivors(queue, ages, held, 0) == 1


def test_named_blocks_replace_the_estimate_and_old_requests_expire() -> None:
    queue = EngineQueue()
    queue.add(1, Queued((1,), 3, 0, 0.0))
    queue.named(1, (1, 2, 3, 4))
    assert queue.requests[1].blocks == (1, 2, 3, 4) and queue.requests[1].unnamed == 0
    assert queue.work() == 4
    queue.add(2, Queued((5,), 0, 0, 10.0))
    queue.expire(QUEUE_TTL_S + 5.0)
    assert list(queue.requests) == [2]
    assert queue.finish(1) is None and queue.finish(2) is not None


def test_past_the_replay_bound_requests_ahead_count_as_computed_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ages, held = _worker([1, 2, 3, 4], [10, 11])
    queue = EngineQueue()
    queue.add(1, Queued((30, 31), 0, 0, 0.0))
    queue.add(2, Queued((1, 2, 3, 4), 0, 0, 0.0))  # would keep ours, past the bound
    assert _survivors(queue, ages, held, 0) == 4
    monkeypatch.setattr(replan_module, "MAX_REPLAYED_BLOCKS", 3)
    assert _survivors(queue, ages, held, 0) == 0  # 2 + 4 evicted, all named blocks ours first


def test_blocks_the_requests_ahead_store_extend_the_match() -> None:
    ages, held = _worker([1, 2], [10, 11])  # ours' first two only
    queue = EngineQueue()
    queue.add(1, Queued((1, 2, 3, 4, 5), 0, 0, 0.0))  # an earlier turn stores 3, 4 and 5
    found = survivors(queue, ages, held=held, room=0, blocks=[1, 2, 3, 4, 9], depth=2)
    assert found == 4

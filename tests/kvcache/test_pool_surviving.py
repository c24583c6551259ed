"""A Pick replays each candidate's queue (`kvcache.queue.survivors`) to tell what of its match
survives until the request runs: ~1.4 ms a worker with 8 requests ahead, the largest share
of a precise Pick's own CPU on Dynamo's mockers at 9 req/s (docs/benchmarks.md, h132). A
match of one block at most (the chat template's header, which every worker holds) is taken
as it is: the replay could tell at most that block."""

from __future__ import annotations

import pytest

from kinference.kvcache import pool as pool_module
from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.kvcache.pool import PoolCaches, Request
from kinference.kvevents.events import BlockStored

HEADER = [1, 2, 3, 4]  # the chat template's first block, shared by every prompt


def _prompt(*body: int) -> PromptBlocks:
    tokens = [*HEADER, *body]
    return PromptBlocks(len(tokens), 4, tuple(identities(tokens, 4)))


def _busy_worker() -> PoolCaches:
    """Worker 0 holds an old prompt (header and 3 blocks) and has two long requests ahead
    that overflow its cache of 8 blocks: everything it holds now is evicted before a
    request sent now runs."""
    pool = PoolCaches("p", 4, clock=lambda: 0.0)
    pool.apply(0, [BlockStored((1, 2, 3, 4), None, (*HEADER, *range(50, 62)), 4)])
    pool.capacity = 8
    for key, start in ((1, 100), (2, 200)):
        pool.sent(0, _prompt(*range(start, start + 24)), 0, Request(key, 0, 0.0))
    return pool


def _replays(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    depths: list[int] = []
    replay = pool_module.survivors

    def counted(*args: object, **kwargs: int) -> int:
        depths.append(kwargs["depth"])
        return replay(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pool_module, "survivors", counted)
    return depths


def test_a_match_of_the_header_alone_is_not_replayed(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = _busy_worker()
    depths = _replays(monkeypatch)
    blocks = _prompt(*range(300, 312)).blocks  # only the header in common with the old one
    assert pool.surviving(0, blocks, 1) == 1  # main replayed the queue for this one block
    assert pool.surviving(0, blocks, 0) == 0
    assert depths == []


def test_a_longer_match_is_still_replayed(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = _busy_worker()
    depths = _replays(monkeypatch)
    blocks = _prompt(*range(50, 62), 400).blocks  # the old prompt again
    # The requests ahead evict it all but the header, which they use themselves.
    assert pool.surviving(0, blocks, 4) == 1
    assert depths == [4]

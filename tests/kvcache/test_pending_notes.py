"""The blocks routed requests will reuse (`kvcache.pending.note`) under a crowd of requests
beyond the bound: the oldest notes go, the newest survive (they were all cleared at once)."""

from __future__ import annotations

from kinference.kvcache.blocks import BlockId
from kinference.kvcache.pending import MAX_PENDING_BLOCKS, note, unnote

PER_REQUEST = 1000


def _blocks(key: int) -> list[BlockId]:
    return [BlockId(key * PER_REQUEST + i) for i in range(PER_REQUEST)]


def test_a_crowd_beyond_the_bound_keeps_the_newest_notes() -> None:
    reused: dict[BlockId, int] = {}
    crowd = MAX_PENDING_BLOCKS // PER_REQUEST + 50  # 50 requests' notes too many
    for key in range(crowd):
        note(reused, key, _blocks(key))
        assert len(reused) <= MAX_PENDING_BLOCKS
    assert len(reused) == MAX_PENDING_BLOCKS
    for key in range(crowd - MAX_PENDING_BLOCKS // PER_REQUEST, crowd):  # the newest
        assert all(reused.get(block) == key for block in _blocks(key)), key
    assert not any(block in reused for key in range(50) for block in _blocks(key))  # oldest


def test_a_block_noted_again_is_as_new_as_its_last_note() -> None:
    reused: dict[BlockId, int] = {}
    header = BlockId(-1)  # held by every worker: every request notes it
    crowd = MAX_PENDING_BLOCKS // PER_REQUEST + 50
    for key in range(crowd):
        note(reused, key, [header, *_blocks(key)])
        assert reused[header] == key
    unnote(reused, crowd - 1, [header])  # the last request ran
    assert header not in reused and len(reused) < MAX_PENDING_BLOCKS


def test_one_prompt_past_the_bound_keeps_its_last_blocks() -> None:
    reused = {BlockId(-1): 0}
    blocks = [BlockId(i) for i in range(MAX_PENDING_BLOCKS + 10)]
    note(reused, 1, blocks)
    assert len(reused) == MAX_PENDING_BLOCKS and BlockId(-1) not in reused
    assert BlockId(9) not in reused and reused[blocks[-1]] == 1 and reused[BlockId(10)] == 1

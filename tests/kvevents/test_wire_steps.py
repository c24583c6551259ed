"""A payload decoded in bounded steps (`kvevents.steps`) is the payload decoded at once:
unpacked a chunk per step, its large events cut into events of consecutive blocks (each
the next one's parent) that the index applies to the same blocks (below its per-worker
bound: past it, a cut event is bounded on its own, see docs/architecture.md); anything
refused at once is refused in steps. A payload at the size limit is many steps, none more
than a step's values."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinference.kvcache.index import BlockIndex
from kinference.kvevents.events import BlockRemoved, BlockStored, EventBatch
from kinference.kvevents.steps import Budget, blocks_per_event, cost, finish
from kinference.kvevents.unpack import UNPACKED_PER_UNIT
from kinference.kvevents.wire import MalformedBatch, decode_batch, decode_steps


def in_steps(payload: bytes, per_step: int) -> tuple[EventBatch, int]:
    """The batch, and how many turns the loop would have had while decoding it."""
    steps = decode_steps(payload, Budget(per_step))
    turns = 0
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value, turns  # type: ignore[no-any-return]
        turns += 1


def held(batch: EventBatch) -> tuple[dict[Any, Any], int]:
    index = BlockIndex()
    index.apply(0, batch.events)
    blocks, _ = index.holdings().get(0, ({}, None))
    return dict(blocks), index.orphans(0)


hashes = st.integers(0, 40)  # few values: stores that repeat and removals that hit
stores = st.tuples(
    st.just("BlockStored"),
    st.lists(hashes, max_size=12),
    st.one_of(st.none(), hashes),
    st.integers(1, 3),
)
removals = st.tuples(st.just("BlockRemoved"), st.lists(hashes, max_size=12))


def encode(events: list[tuple[Any, ...]]) -> bytes:
    raw: list[Any] = []
    for event in events:
        if event[0] == "BlockStored":
            _, block_hashes, parent, size = event
            tokens = [h % 7 for h in block_hashes for _ in range(size)]
            raw.append(["BlockStored", block_hashes, parent, tokens, size, None, None])
        else:
            raw.append(["BlockRemoved", event[1], None])
    return msgpack.packb([1.0, raw, None])


@given(st.lists(st.one_of(stores, removals), max_size=8), st.integers(1, 16))
def test_in_steps_the_index_holds_the_same_blocks(events: list[Any], per_step: int) -> None:
    payload = encode(events)
    at_once = decode_batch(payload)
    stepped, _ = in_steps(payload, per_step)
    assert held(stepped) == held(at_once)
    assert stepped.ts == at_once.ts and stepped.dp_rank == at_once.dp_rank


@given(st.binary(max_size=300), st.integers(1, 64))
def test_what_is_refused_at_once_is_refused_in_steps(data: bytes, per_step: int) -> None:
    try:
        expected: EventBatch | None = decode_batch(data)
    except MalformedBatch:
        expected = None
    try:
        got: EventBatch | None = in_steps(data, per_step)[0]
    except MalformedBatch:
        got = None
    assert (got is None) == (expected is None)


def test_truncated_and_trailing_bytes_are_refused_in_steps() -> None:
    payload = encode([("BlockStored", list(range(100)), None, 2)])
    for bad in (payload[:-1], payload + b"\x00"):
        with pytest.raises(MalformedBatch, match="not msgpack"):
            in_steps(bad, 8)
        with pytest.raises(MalformedBatch, match="not msgpack"):
            decode_batch(bad)


def test_a_large_batch_is_many_bounded_steps() -> None:
    """1M one-byte hashes removed and 500k one-token blocks stored: a turn at least every
    `per_step` bytes unpacked and every `per_step` values cut, and the events it is cut
    into name at most a step's blocks each, in order."""
    per_step = 32_768
    removed = msgpack.packb([1.0, [["BlockRemoved", [1] * 1_000_000, None]], None])
    batch, turns = in_steps(removed, per_step)
    assert turns >= len(removed) // (per_step * UNPACKED_PER_UNIT) + 1_000_000 // blocks_per_event(
        0
    )
    assert all(isinstance(e, BlockRemoved) for e in batch.events)
    assert sum(len(e.block_hashes) for e in batch.events) == 1_000_000  # type: ignore[union-attr]
    n = 500_000
    stored = msgpack.packb(
        [1.0, [["BlockStored", list(range(1, n + 1)), None, [5] * n, 1, None, None]], None]
    )
    batch, turns = in_steps(stored, per_step)
    assert turns >= len(stored) // (per_step * UNPACKED_PER_UNIT) + n // blocks_per_event(1)
    cut = [e for e in batch.events if isinstance(e, BlockStored)]
    assert all(len(e.block_hashes) <= blocks_per_event(1) for e in cut)
    assert [h for e in cut for h in e.block_hashes] == list(range(1, n + 1))
    assert [e.parent for e in cut] == [None, *(e.block_hashes[-1] for e in cut[:-1])]
    assert finish(decode_steps(stored, Budget())).events == batch.events


def test_a_large_payload_leaves_the_startup_heap_frozen() -> None:
    """Decoding in steps never hands back the heap frozen at startup (`kinference.heap`):
    `gc.unfreeze` at a step did, and its full collections held the loop 60-100 ms again."""
    import gc

    hashes = list(range(1, 200_001))
    payload = bytes(msgpack.packb([0.0, [["BlockRemoved", hashes, None]], None]))
    assert len(payload) > 128 * 1024  # decoded in steps
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        batch, turns = in_steps(payload, 32_000)
        assert turns > 1 and sum(len(e.block_hashes) for e in batch.events) == len(hashes)
        assert gc.get_freeze_count() >= frozen > 0
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("padding", [0, 6_000])
def test_every_event_decoded_costs_at_most_a_step_to_apply(padding: int) -> None:
    """Cut by what an event costs to apply (`steps.cost`: a block hash is 16 units), in a
    payload decoded at once and in one unpacked in chunks (`padding` small events take it
    past 128 KiB): 9,000 hashes are 9,001 values but ~144k units, over a 32k step (before:
    the chunked path counted values, and such an event held the loop ~4 steps at once)."""
    small = [["BlockRemoved", [7, 8], None]] * padding
    events = [*small, ["BlockRemoved", list(range(1, 9001)), None]]
    payload = bytes(msgpack.packb([0.0, events, None]))
    assert (len(payload) > 128 * 1024) == (padding > 0)
    batch, _ = in_steps(payload, 32_768)
    assert all(cost(event) <= 32_768 for event in batch.events)
    removed = [h for e in batch.events[padding:] for h in e.block_hashes]  # type: ignore[union-attr]
    assert removed == list(range(1, 9001))

"""The decoder against batches encoded as vLLM encodes them, in every layout it has shipped,
and against malformed ones."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinference.kvevents.events import AllBlocksCleared, BlockRemoved, BlockStored, EventBatch
from kinference.kvevents.wire import (
    MAX_PAYLOAD_BYTES,
    MalformedBatch,
    decode_batch,
    decode_seq,
    encode_seq,
)
from tests.kvevents import vllm_format as vllm


def test_current_vllm_layout_tagged_maps() -> None:
    payload = vllm.encode(
        [
            vllm.stored([11, 12], list(range(8)), parent=None),
            vllm.BlockRemoved([11], "GPU"),
            vllm.AllBlocksCleared(),
        ],
        ts=12.5,
        rank=1,
    )
    assert decode_batch(payload) == EventBatch(
        12.5,
        (
            BlockStored((11, 12), None, tuple(range(8)), 4, None, "GPU"),
            BlockRemoved((11,), "GPU"),
            AllBlocksCleared(),
        ),
        1,
    )


def test_old_vllm_layout_tagged_arrays() -> None:
    batch = vllm.EventBatch(
        3.0,
        [vllm.OldBlockStored([5], 4, [1, 2, 3, 4], 4, None), vllm.OldBlockRemoved([5])],
    )
    decoded = decode_batch(msgpack.packb(msgpack.unpackb(vllm._ENCODER.encode(batch))))
    assert decoded.events == (
        BlockStored((5,), 4, (1, 2, 3, 4), 4, None, None),
        BlockRemoved((5,), None),
    )
    assert decoded.dp_rank is None


def test_bytes_hashes_and_map_batch() -> None:
    """vLLM's default hashes are bytes (sha256); newest batches may be maps."""
    event = vllm.stored([b"\x01" * 32], [7, 7, 7, 7], parent=b"\x02" * 32)
    raw = msgpack.unpackb(vllm.encode([event]), raw=False)
    payload = msgpack.packb({"ts": raw[0], "events": raw[1], "data_parallel_rank": None})
    (decoded,) = decode_batch(payload).events
    assert decoded == BlockStored((b"\x01" * 32,), b"\x02" * 32, (7, 7, 7, 7), 4, None, "GPU")


def test_lora_name_and_extra_fields_are_read_or_ignored() -> None:
    event = vllm.BlockStored([1], None, [1, 2], 2, 3, "GPU", lora_name="sql", group_idx=2)
    (decoded,) = decode_batch(vllm.encode([event])).events
    assert isinstance(decoded, BlockStored) and decoded.lora == "sql"
    (by_id,) = decode_batch(vllm.encode([vllm.BlockStored([1], None, [1, 2], 2, 3, None)])).events
    assert isinstance(by_id, BlockStored) and by_id.lora == "3"


def test_sequence_numbers() -> None:
    assert decode_seq(vllm.seq_bytes(0)) == 0
    assert decode_seq(vllm.seq_bytes(2**40 + 3)) == 2**40 + 3
    assert decode_seq(vllm.seq_bytes(-1)) == -1  # the replay's end marker
    assert decode_seq(encode_seq(77)) == 77
    with pytest.raises(MalformedBatch):
        decode_seq(b"\x00" * 4)


def _packed(value: object) -> bytes:
    return msgpack.packb(value)


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (b"\xc1", "not msgpack"),
        (b"\x92\x01", "not msgpack"),  # truncated
        (b"\x81\x90\x00", "not msgpack"),  # a map keyed by an array (found by hypothesis)
        (_packed("hello"), "neither"),
        (_packed([1.0]), "neither"),
        (_packed(["x", []]), "ts is not a number"),
        (_packed([float("nan"), []]), "ts is not a number"),
        (_packed([True, []]), "ts is not a number"),
        (_packed([1.0, {}]), "events is not an array"),
        (_packed([1.0, [], "r"]), "rank"),
        (_packed([1.0, [["Nope"]]]), "unknown event tag"),
        (_packed([1.0, [{"type": "Nope"}]]), "unknown event tag"),
        (_packed([1.0, [5]]), "neither a tagged array"),
        (_packed([1.0, [{"type": "BlockStored", "block_hashes": "x"}]]), "block_hashes"),
        (_packed([1.0, [["BlockStored", [1], None, [1, 2], 4]]]), "2 token ids for 1 blocks"),
        (_packed([1.0, [["BlockStored", [1], None, [1, -2], 2]]]), "token_ids"),
        (_packed([1.0, [["BlockStored", [1], None, [1, 2], 0]]]), "block_size"),
        (_packed([1.0, [["BlockStored", [1], 1.5, [1, 2], 2]]]), "parent_block_hash"),
        (_packed([1.0, [["BlockStored", [1], None, [1, 2], 2, None, 7]]]), "medium"),
        (_packed([1.0, [["BlockRemoved", [None]]]]), "block_hashes"),
        (_packed([1.0, [["BlockStored", [b""], None, [1, 2], 2]]]), "block_hashes"),
    ],
)
def test_malformed_batches_are_refused(payload: bytes, problem: str) -> None:
    with pytest.raises(MalformedBatch, match=problem):
        decode_batch(payload)


def test_deeply_nested_and_huge_payloads_are_refused() -> None:
    with pytest.raises(MalformedBatch):
        decode_batch(b"\x91" * 100_000)  # arrays within arrays: msgpack's stack limit
    with pytest.raises(MalformedBatch, match="over the limit"):
        decode_batch(b"\x00" * (MAX_PAYLOAD_BYTES + 1))


@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_are_refused(data: bytes) -> None:
    try:
        batch = decode_batch(data)
    except MalformedBatch:
        return
    assert isinstance(batch, EventBatch)


hashes = st.one_of(st.integers(0, 2**64 - 1), st.binary(min_size=1, max_size=32))


@given(
    st.lists(
        st.tuples(st.lists(hashes, min_size=1, max_size=4), st.integers(1, 4)),
        max_size=5,
    )
)
def test_what_vllm_encodes_decodes_to_the_same_events(spec: list[tuple[list, int]]) -> None:
    events = [
        vllm.stored(block_hashes, list(range(len(block_hashes) * size)), block_size=size)
        for block_hashes, size in spec
    ]
    decoded = decode_batch(vllm.encode(events))
    assert [e.block_hashes for e in decoded.events] == [tuple(h) for h, _ in spec]  # type: ignore[union-attr]

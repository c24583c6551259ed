"""Hostile batches at the decoder: any msgpack value in any field of any event layout is an
event or `MalformedBatch` (never another exception), and what a publisher names that we
keep (an adapter's name seeds block identities, cached) is bounded."""

from __future__ import annotations

import contextlib
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kinference.kvevents.events import BlockStored
from kinference.kvevents.wire import MAX_LORA_NAME_CHARS, MalformedBatch, decode_batch
from tests.kvevents import vllm_format as vllm

_FIELDS = (
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
)
_TAGS = ("BlockStored", "BlockRemoved", "AllBlocksCleared")
_INT = st.integers(-(2**63), 2**64 - 1)
_LEAF = st.one_of(
    st.none(), st.booleans(), _INT, st.floats(), st.text(max_size=5), st.binary(max_size=70)
)
_VALUE = st.recursive(
    _LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.one_of(st.text(max_size=3), _INT), inner, max_size=5),
    ),
    max_leaves=30,
)
_EVENT = st.one_of(
    st.tuples(st.sampled_from([*_TAGS, "x"]), st.lists(_VALUE, max_size=8)).map(
        lambda tagged: [tagged[0], *tagged[1]]
    ),
    st.dictionaries(
        st.sampled_from(["type", *_FIELDS]), st.one_of(_VALUE, st.sampled_from(_TAGS)), max_size=8
    ),
    _VALUE,
)
_BATCH = st.one_of(
    st.tuples(_VALUE, st.lists(_EVENT, max_size=4), _VALUE).map(list),
    st.fixed_dictionaries({"ts": _VALUE, "events": st.lists(_EVENT, max_size=4)}),
    _VALUE,
)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(_BATCH)
def test_any_value_in_any_field_is_an_event_or_refused(batch: Any) -> None:
    with contextlib.suppress(MalformedBatch):
        decode_batch(msgpack.packb(batch, use_bin_type=True))


def _stored(**lora: Any) -> bytes:
    return vllm.encode(
        [["BlockStored", [1], None, [1, 2], 2, lora.get("id"), "GPU", lora.get("name")]]
    )


def test_adapter_names_are_bounded() -> None:
    """A name longer than `MAX_LORA_NAME_CHARS` is refused (20 of 4-8 MB kept 128 MB in
    `seed`'s cache, and it keeps 256); an id is an integer, never any value made a string."""
    fits = decode_batch(_stored(name="a" * MAX_LORA_NAME_CHARS)).events[0]
    assert isinstance(fits, BlockStored) and fits.lora == "a" * MAX_LORA_NAME_CHARS
    with pytest.raises(MalformedBatch, match="lora_name"):
        decode_batch(_stored(name="a" * (MAX_LORA_NAME_CHARS + 1)))
    with pytest.raises(MalformedBatch, match="lora_id"):
        decode_batch(_stored(id=[1] * 1000))
    with pytest.raises(MalformedBatch, match="lora_id"):
        decode_batch(_stored(id="sql"))
    by_id = decode_batch(_stored(id=7)).events[0]
    assert isinstance(by_id, BlockStored) and by_id.lora == "7"


def test_a_publishers_value_is_quoted_short() -> None:
    """What `MalformedBatch` says is logged: a publisher's tag is quoted by its start."""
    with pytest.raises(MalformedBatch) as raised:
        decode_batch(msgpack.packb([1.0, [["x" * 1_000_000]]]))
    assert len(str(raised.value)) < 100
    with pytest.raises(MalformedBatch) as raised:
        decode_batch(msgpack.packb([1.0, [{"type": list(range(100_000))}]]))
    assert len(str(raised.value)) < 100

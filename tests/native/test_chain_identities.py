"""The C block identities (`kinference.native._chain.identities`) against numpy's
(`kvcache.blocks.identities(..., native=False)`, the reference): the same bits over random
token ids, block sizes, parents and adapters. Skipped where the extension is not built
(tests/native/test_chain.py fails where it should have been)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.kvcache.blocks import identities, seed
from kinference.native import Chain, load_chain


def native() -> Chain:
    loaded = load_chain()
    if loaded is None:
        pytest.skip("the C extension kinference.native._chain is not built")
    return loaded


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 2**32),
    st.integers(0, 600),
    st.sampled_from([1, 2, 3, 15, 16, 16, 17, 32, 64, 250]),
    st.one_of(st.none(), st.integers(-(2**70), 2**70), st.integers(0, 2**64 - 1)),
    st.sampled_from([None, "", "lora-a"]),
)
def test_native_identities_are_numpys(
    draw: int, length: int, block_size: int, parent: int | None, adapter: str | None
) -> None:
    native()
    tokens = np.random.default_rng(draw).integers(0, 2**32, length, dtype=np.uint64)
    ids = tokens.astype(np.uint32)
    expected = identities(ids, block_size, adapter, parent, native=False)
    assert identities(ids, block_size, adapter, parent) == expected
    # What is not a contiguous uint32 array goes to numpy either way: the same answer.
    assert identities(ids.tolist(), block_size, adapter, parent) == expected
    assert identities(ids[1:], block_size, adapter, parent) == identities(
        ids[1:], block_size, adapter, parent, native=False
    )
    doubled = np.repeat(ids, 2)[::2]
    assert identities(doubled, block_size, adapter, parent) == expected
    # A prompt named in pieces continues its chain.
    cut = len(expected) // 2 * block_size
    head = identities(ids[:cut], block_size, adapter, parent)
    tail = identities(ids[cut:], block_size, parent=head[-1] if head else parent)
    if head or parent is not None:
        assert head + tail == expected


def test_long_and_short_prompts_agree() -> None:
    native()
    ids = np.random.default_rng(4).integers(0, 2**32, 70000, dtype=np.uint64).astype(np.uint32)
    for size in (1, 16, 70000, 70001):
        assert identities(ids, size) == identities(ids, size, native=False)
    assert identities(ids[:0], 16) == [] == identities(ids[:15], 16)


def test_the_raw_function_refuses_bad_arguments() -> None:
    loaded = native()
    ids = np.arange(32, dtype=np.uint32)
    assert loaded.identities(ids.data, 16, seed(None)) == identities(ids, 16)
    with pytest.raises(ValueError):
        loaded.identities(ids.data, 0, 0)
    with pytest.raises(ValueError):
        loaded.identities(b"abcde", 1, 0)  # not whole 4-byte ids
    with pytest.raises(TypeError):
        loaded.identities("abcd", 1, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        loaded.identities(ids.data, 16, 1.5)  # type: ignore[arg-type]
    with pytest.raises(BufferError):
        loaded.identities(memoryview(ids)[::2], 1, 0)
    assert loaded.identities(b"", 4, 1.5) == []  # type: ignore[arg-type]  # no block: unread

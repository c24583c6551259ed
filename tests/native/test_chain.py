"""The C chain (`kinference.native._chain`) against its pure-Python reference, `chain_tuple`:
the same hashes over random data, block sizes, counts and continuations, and the same
exception types for bad arguments. The native half skips where the extension is not built,
except that a machine able to build it must have (`test_the_extension_is_built_where_it_can_be`).
"""

from __future__ import annotations

import os
import random
import shutil
import sysconfig
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.native import load_chain
from kinference.routing.blocks import PrefixHasher
from kinference.routing.chain import ChainTuple, chain_function, chain_tuple
from tests.routing.spelled_chain import spelled_out

BUFFERS = (bytes, bytearray, memoryview)


def native() -> ChainTuple:
    if load_chain() is None:
        pytest.skip("the C extension kinference.native._chain is not built")
    return chain_function(native=True)


def test_the_extension_is_built_where_it_can_be() -> None:
    """A silent fallback must not hide a broken build: where CI runs, or a C compiler and
    Python's headers are there, `pip install` must have built the extension."""
    headers = Path(sysconfig.get_paths()["include"], "Python.h").is_file()
    compiler = shutil.which("gcc") or shutil.which("cc")
    if not os.environ.get("CI") and not (compiler and headers):
        pytest.skip("no C compiler or Python headers here: the pure form is expected")
    assert load_chain() is not None, "kinference.native._chain did not build (see setup.py)"


def test_pure_is_chosen_on_request() -> None:
    assert chain_function(native=False) is chain_tuple
    assert PrefixHasher(native=False)._chain is chain_tuple


def test_the_pure_form_is_the_chain_spelled_out() -> None:
    rng = random.Random(3)
    for block_bytes in (1, 5, 8, 13, 64, 65, 130):
        data = rng.randbytes(block_bytes * 9 + 3)
        assert chain_tuple("m", data, block_bytes, 9) == spelled_out("m", data, block_bytes, 9)


@settings(max_examples=400, deadline=None)
@given(
    st.integers(0, 2**32),
    st.sampled_from([1, 3, 7, 8, 9, 15, 16, 24, 63, 64, 64, 64, 65, 100, 128, 200]),
    st.integers(0, 80),
    st.sampled_from(BUFFERS),
    st.sampled_from(["m", "", "meta-llama/Llama-3.1-8B-Instruct"]),
)
def test_native_hashes_are_the_pure_ones(
    draw: int, block_bytes: int, count: int, kind: type, model: str
) -> None:
    fast = native()
    rng = random.Random(draw)
    data = rng.randbytes(block_bytes * count + rng.randint(0, block_bytes))
    whole = chain_tuple(model, data, block_bytes, count)
    assert fast(model, kind(data), block_bytes, count) == whole
    # Continued from a known beginning: the known hashes reused (as objects), the rest
    # chained on, whether the known ones came from these bytes or from others.
    same = rng.randint(0, count)
    other = rng.randbytes(len(data))
    for known in (whole, chain_tuple(model, other, block_bytes, count)):
        continued = fast(model, kind(data), block_bytes, count, known=known, same=same)
        assert continued == chain_tuple(model, data, block_bytes, count, known=known, same=same)
        assert all(a is b for a, b in zip(continued[:same], known, strict=False))
    # Fewer blocks than the data holds, a longer known tuple than `same`.
    shorter = rng.randint(same, count)
    assert fast(model, data, block_bytes, shorter, known=whole, same=same) == chain_tuple(
        model, data, block_bytes, shorter, known=whole, same=same
    )


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 200))
def test_an_offset_memoryview_hashes_as_its_bytes(draw: int, block_bytes: int) -> None:
    fast = native()
    rng = random.Random(draw)
    data = rng.randbytes(block_bytes * 5 + 40)
    skip = rng.randint(1, 17)  # unaligned for 8-byte loads
    view = memoryview(data)[skip:]
    count = len(view) // block_bytes
    expected = chain_tuple("m", bytes(view), block_bytes, count)
    assert fast("m", view, block_bytes, count) == expected
    assert chain_tuple("m", view, block_bytes, count) == expected


def test_long_and_empty_inputs_agree() -> None:
    fast = native()
    data = random.Random(5).randbytes(64 * 5000)  # past the precomputed power tables
    assert fast("m", data, 64, 5000) == chain_tuple("m", data, 64, 5000)
    whole = chain_tuple("m", data, 64, 5000)
    assert fast("m", data, 64, 5000, known=whole[:17], same=17) == whole
    for empty in (b"", bytearray(), memoryview(b"abc")):
        assert fast("m", empty, 64, 0) == chain_tuple("m", empty, 64, 0) == ()
    assert fast("m", data, 64, 3, known=whole, same=3) == chain_tuple(
        "m", data, 64, 3, known=whole, same=3
    )


def test_typed_and_two_dimensional_buffers_read_as_their_bytes() -> None:
    fast = native()
    data = random.Random(9).randbytes(64 * 6)
    for view in (memoryview(data).cast("I"), memoryview(data).cast("B", (6, 64))):
        assert fast("m", view, 64, 6) == chain_tuple("m", view, 64, 6)
        assert fast("m", view, 64, 6) == chain_tuple("m", data, 64, 6)


BAD = [
    # (data, block_bytes, count, known, same): one argument wrong at a time.
    (b"x" * 64, 0, 0, (), 0),
    (b"x" * 64, -8, 1, (), 0),
    (b"x" * 64, 64, 2, (), 0),
    (b"x" * 64, 64, -1, (), 0),
    (b"x" * 64, 64, 2**70, (), 0),
    (b"x" * 64, 2**70, 1, (), 0),
    (b"x" * 64, 64, 1, (), -1),
    (b"x" * 64, 64, 1, (), 1),
    (b"x" * 128, 64, 1, (1, 2), 2),
    (b"x" * 64, 64, 1, (1,), 2**64),
    (b"x" * 64, 64, 1, [1], 1),
    (b"x" * 64, 64, 1, ("1",), 1),
    (b"x" * 64, 64, 1, (1.0,), 1),
    (b"x" * 64, 64, 1, (-1,), 1),
    (b"x" * 64, 64, 1, (2**64,), 1),
    ("x" * 64, 64, 1, (), 0),
    (None, 64, 1, (), 0),
    (memoryview(b"x" * 128)[::2], 64, 1, (), 0),
    (b"x" * 64, 64.0, 1, (), 0),
    (b"x" * 64, 64, "1", (), 0),
    (b"x" * 64, 64, 1, (), None),
]


@pytest.mark.parametrize("arguments", BAD)
def test_bad_arguments_are_refused_alike(arguments: tuple[object, ...]) -> None:
    fast = native()
    data, block_bytes, count, known, same = arguments
    with pytest.raises(Exception) as pure_error:
        chain_tuple("m", data, block_bytes, count, known=known, same=same)  # type: ignore[arg-type]
    with pytest.raises(Exception) as native_error:
        fast("m", data, block_bytes, count, known=known, same=same)  # type: ignore[arg-type]
    assert native_error.type is pure_error.type


def test_the_hasher_gives_the_same_tuples_either_way() -> None:
    """Decisions follow from the hashes: equal hashes everywhere, equal decisions."""
    native()
    rng = random.Random(11)
    pure, fast = PrefixHasher(native=False), PrefixHasher()
    document = "".join(rng.choice("abcdé ") for _ in range(20000))
    for turn in range(200):
        segments = (document[: rng.randint(0, 20000)], *(f"turn {i}" for i in range(turn % 9)))
        expected = pure.hashes("m", segments, block_bytes=64, max_blocks=256)
        assert fast.hashes("m", segments, block_bytes=64, max_blocks=256) == expected

"""The arithmetic of the prefix index's chained block hashes (`kinference.routing.blocks`).

Block i's hash is fmix64(c_i), c_i = c_(i-1) * B + h_i mod 2^64 (c_-1 = 0), h_i a mix of
the block's 8-byte words (the model's seed xor-ed into h_0). Two forms give the same bits:
numpy over all blocks at once (a cumulative sum: B is odd, hence invertible), cheap per
block but ~25 numpy calls whatever the count; and Python integers block by block, for the
few blocks a prompt adds to a known beginning (a numpy call costs ~1 µs inside a Pick, a
block in Python ~1.3). fmix64 is invertible, so a chain continues from a hash alone.
`chain_tuple` puts them together as the prefix hasher asks (a tuple, continued from known
hashes); `chain_function` answers it or its C form (`kinference.native`), the same bits.
"""

from __future__ import annotations

import functools
import hashlib
import operator
import struct
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from kinference.native import load_chain

# Odd 64-bit constants: the chain's base and its inverse mod 2^64, fmix64's multipliers, and
# one multiplier per 8-byte word of a block (cycled for blocks over 64 bytes).
BASE = 0x9E3779B97F4A7C15
_BASE_INVERSE = pow(BASE, -1, 1 << 64)
_MASK = (1 << 64) - 1
_M1, _M2 = 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53
_M1_INVERSE, _M2_INVERSE = pow(_M1, -1, 1 << 64), pow(_M2, -1, 1 << 64)
_MIX_1, _MIX_2, _SHIFT = np.uint64(_M1), np.uint64(_M2), np.uint64(33)
_LANE_VALUES = (
    0x87C37B91114253D5, 0x4CF5AD432745937F, 0x52DCE729DA3ED7B5, 0x38495AB5D6E6E2AB,
    0xA0761D6478BD642F, 0xE7037ED1A0B428DB, 0x8EBC6AF09C88C6E3, 0x589965CC75374CC3,
)  # fmt: skip
_LANES = np.array(_LANE_VALUES, dtype=np.uint64)
_WORDS = struct.Struct("<8Q")
PYTHON_BLOCKS = 8  # up to this many blocks of 64 bytes, `chain_python` costs less
Data = bytes | bytearray | memoryview


class ChainTuple(Protocol):
    """`chain_tuple` or its C form (`chain_function`)."""

    def __call__(
        self,
        model: str,
        data: Data,
        block_bytes: int,
        count: int,
        *,
        known: tuple[int, ...] = (),
        same: int = 0,
    ) -> tuple[int, ...]: ...


def chain_function(native: bool = True) -> ChainTuple:
    """`chain_tuple`, in C where the extension is built and `native` (the same bits and
    exceptions: tests/native), else the pure-Python form itself."""
    loaded = load_chain() if native else None
    if loaded is None:
        return chain_tuple
    hashes = loaded.hashes

    def native_form(
        model: str,
        data: Data,
        block_bytes: int,
        count: int,
        *,
        known: tuple[int, ...] = (),
        same: int = 0,
    ) -> tuple[int, ...]:
        return hashes(data, block_bytes, count, seed(model) if same == 0 else 0, known, same)

    return native_form


def chain_tuple(
    model: str,
    data: Data,
    block_bytes: int,
    count: int,
    *,
    known: tuple[int, ...] = (),
    same: int = 0,
) -> tuple[int, ...]:
    """The hashes (`fmix64(c_i)`) of blocks 0..`count` - 1 of `data`, whose first `same` are
    `known`'s: those, then the chain continued from `known[same - 1]` (`hashes_python` for
    a few blocks of 64 bytes, else `chain_values`). ValueError for a count, block size or
    `same` out of range, TypeError for what is not a buffer or a tuple, OverflowError for a
    known hash outside [0, 2^64)."""
    block_bytes, count, same = map(operator.index, (block_bytes, count, same))
    if same == 0:
        seed(model)  # as the C form's caller does first: the same error for a bad model
    view = _checked(data, block_bytes, count, known, same)
    before = unmix(_known_value(known[same - 1])) if same else 0
    if same == count:
        return known[:count]
    if same == 0:
        return tuple(mix64_into(chain_values(model, view, block_bytes, count)).tolist())
    if block_bytes == 64 and count - same <= PYTHON_BLOCKS:
        return known[:same] + tuple(hashes_python(view, same, count, before))
    chain = chain_values(model, view, block_bytes, count, start=same, before=before)
    return known[:same] + tuple(mix64_into(chain).tolist())


def _checked(
    data: Data, block_bytes: int, count: int, known: tuple[int, ...], same: int
) -> memoryview:
    """`data` as bytes, once the arguments are checked as the C form checks them."""
    view = memoryview(data)
    if not view.c_contiguous:
        raise BufferError("data is not C-contiguous")
    view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
    if block_bytes < 1:
        raise ValueError("block_bytes must be at least 1")
    if count < 0 or count > view.nbytes // block_bytes:
        raise ValueError("count must be within the data's whole blocks")
    if not isinstance(known, tuple):
        raise TypeError("known must be a tuple")
    if same < 0 or same > count or same > len(known):
        raise ValueError("same must be within count and the known hashes")
    return view


def _known_value(value: object) -> int:
    if not isinstance(value, int):
        raise TypeError("a known hash must be an int")
    if not 0 <= value <= _MASK:
        raise OverflowError("a known hash must be in [0, 2**64)")
    return value


def chain_values(
    model: str, data: Data, block_bytes: int, count: int, *, start: int = 0, before: int = 0
) -> npt.NDArray[np.uint64]:
    """c_i for blocks `start`..`count` - 1 of `data` (numpy), `before` being c_(start-1)
    (unused when `start` is 0): c_(start+t) = B^t * sum over j <= t of h'_(start+j) * B^-j
    with h'_start = h_start + before * B."""
    size = count - start
    raw = np.frombuffer(data, dtype=np.uint8, count=size * block_bytes, offset=start * block_bytes)
    raw = raw.reshape(size, -1)
    if block_bytes % 8:
        raw = np.pad(raw, ((0, 0), (0, -block_bytes % 8)))
    words = raw.view(np.uint64) if raw.flags.c_contiguous else raw.copy().view(np.uint64)
    lanes = _LANES if words.shape[1] == len(_LANES) else np.resize(_LANES, words.shape[1])
    # Array arithmetic on uint64 wraps modulo 2^64 silently, which is what a hash wants.
    # In place on fresh arrays, the lanes as one product: numpy's overhead per call is
    # most of the cost (~100 blocks at 6 KB).
    blocks = mix64_into(words @ lanes)
    first = blocks.item(0)
    if start == 0:
        blocks[0] = first ^ seed(model)
    else:
        blocks[0] = (first + before * BASE) & _MASK
    inverse, powers = _powers(size)
    blocks *= inverse
    chain = np.cumsum(blocks, dtype=np.uint64)
    chain *= powers
    return chain


def hashes_python(data: Data, start: int, count: int, before: int) -> list[int]:
    """fmix64(c_i) for blocks `start` (> 0) ..`count` - 1 of 64 bytes, in Python integers:
    `chain_values` then `mix64_into`, the same bits."""
    hashes: list[int] = []
    chained = before
    l0, l1, l2, l3, l4, l5, l6, l7 = _LANE_VALUES
    for offset in range(start * 64, count * 64, 64):
        w0, w1, w2, w3, w4, w5, w6, w7 = _WORDS.unpack_from(data, offset)
        block = w0 * l0 + w1 * l1 + w2 * l2 + w3 * l3 + w4 * l4 + w5 * l5 + w6 * l6 + w7 * l7
        chained = (chained * BASE + mix(block & _MASK)) & _MASK
        hashes.append(mix(chained))
    return hashes


def mix(value: int) -> int:
    """fmix64 of one value in [0, 2^64)."""
    value ^= value >> 33
    value = (value * _M1) & _MASK
    value ^= value >> 33
    value = (value * _M2) & _MASK
    return value ^ (value >> 33)


def unmix(value: int) -> int:
    """The value whose `mix` is `value` (x ^ x >> 33 is its own inverse on 64 bits)."""
    value ^= value >> 33
    value = (value * _M2_INVERSE) & _MASK
    value ^= value >> 33
    value = (value * _M1_INVERSE) & _MASK
    return value ^ (value >> 33)


def mix64(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """A 64-bit finaliser (MurmurHash3's fmix64): every input bit moves every output bit
    (uint64 arithmetic wraps modulo 2^64, as a hash wants). Also `kvcache.blocks`'."""
    values = values ^ (values >> np.uint64(33))
    values = values * _MIX_1
    values = values ^ (values >> np.uint64(33))
    values = values * _MIX_2
    return values ^ (values >> np.uint64(33))


def mix64_into(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """`mix64` overwriting `values` (an array of the caller's own): the same bits, two
    allocations fewer per step."""
    shifted = values >> _SHIFT
    values ^= shifted
    values *= _MIX_1
    np.right_shift(values, _SHIFT, out=shifted)
    values ^= shifted
    values *= _MIX_2
    np.right_shift(values, _SHIFT, out=shifted)
    values ^= shifted
    return values


def _powers(count: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """(B^-j, B^j) for j < count, mod 2^64: slices of the precomputed tables when they
    reach, computed for a longer prompt."""
    if count <= len(_POWERS):
        return _INVERSE_POWERS[:count], _POWERS[:count]
    return _power_table(_BASE_INVERSE, count), _power_table(BASE, count)


def _power_table(base: int, count: int) -> npt.NDArray[np.uint64]:
    factors = np.full(count, base, dtype=np.uint64)
    factors[0] = 1
    return np.cumprod(factors, dtype=np.uint64)


# Powers of the chain's base, computed once: enough for max_blocks up to 4096.
_POWERS = _power_table(BASE, 4096)
_INVERSE_POWERS = _power_table(_BASE_INVERSE, 4096)


@functools.lru_cache(maxsize=1024)
def seed(model: str) -> int:
    return int.from_bytes(hashlib.blake2b(model.encode(), digest_size=8).digest(), "little")


def parted(first: Sequence[int], second: Sequence[int], lo: int, hi: int, shift: int = 0) -> int:
    """Where two chains part: the largest n in `lo`..`hi` with `first[shift + n - 1] ==
    second[n - 1]`, given that it holds at `lo` (or `lo` is 0). Chained hashes equal at a
    block are equal up to it, so it is found by halves."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if first[shift + mid - 1] == second[mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return lo

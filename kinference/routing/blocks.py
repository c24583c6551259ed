"""Prompt blocks and their chained hashes, the keys of the approximate prefix index.

The prompt is cut into fixed-size blocks and each block is named by a hash of everything up to
and including it, seeded by the model (a chain: equal hashes mean equal prefixes), the way the
Gateway API Inference Extension does with 64-character blocks.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

SEPARATOR = "\x1e"  # between prompt segments, so ("ab", "c") and ("a", "bc") differ
_SEPARATOR_BYTES = SEPARATOR.encode()
# Odd 64-bit constants: the chain's base and its inverse mod 2^64, fmix64's multipliers, and
# one multiplier per 8-byte word of a block (cycled for blocks over 64 bytes).
_BASE = 0x9E3779B97F4A7C15
_BASE_INVERSE = pow(_BASE, -1, 1 << 64)
_MIX_1 = np.uint64(0xFF51AFD7ED558CCD)
_MIX_2 = np.uint64(0xC4CEB9FE1A85EC53)
_SHIFT = np.uint64(33)
_LANES = np.array(
    [
        0x87C37B91114253D5,
        0x4CF5AD432745937F,
        0x52DCE729DA3ED7B5,
        0x38495AB5D6E6E2AB,
        0xA0761D6478BD642F,
        0xE7037ED1A0B428DB,
        0x8EBC6AF09C88C6E3,
        0x589965CC75374CC3,
    ],
    dtype=np.uint64,
)
_TEXT_REFERENCE = re.compile(r"<text:(\d+):([0-9a-f]+)>")  # see kinference.requests.prompt


def block_hashes(
    model: str, segments: Sequence[str], *, block_bytes: int, max_blocks: int
) -> list[int]:
    """Chained 64-bit hashes of the prompt's full blocks, at most `max_blocks` of them.

    Block i's hash depends on the model and on blocks 0..i, in order. It is computed for all
    blocks at once with numpy: each block's 8-byte words are mixed into one value, the
    model's seed goes into block 0, and the chain is a polynomial hash, sum over j <= i of
    h_j * B^(i-j) mod 2^64, taken as a cumulative sum (B is odd, hence invertible). A
    trailing partial block is left out: engines cache whole blocks only. The values are
    the same in every process (no `hash()`), so replicas can share them.
    """
    data = _leading_bytes(segments, block_bytes * max_blocks)
    return _hash_blocks(model, data, block_bytes, min(len(data) // block_bytes, max_blocks))


def _hash_blocks(model: str, data: bytes, block_bytes: int, count: int) -> list[int]:
    if count == 0:
        return []
    raw = np.frombuffer(data, dtype=np.uint8, count=count * block_bytes).reshape(count, -1)
    if block_bytes % 8:
        raw = np.pad(raw, ((0, 0), (0, -block_bytes % 8)))
    words = raw.view(np.uint64) if raw.flags.c_contiguous else raw.copy().view(np.uint64)
    lanes = _LANES if words.shape[1] == len(_LANES) else np.resize(_LANES, words.shape[1])
    # Array arithmetic on uint64 wraps modulo 2^64 silently, which is what a hash wants.
    # In place on fresh arrays, the lanes as one product: ~1/3 less of a Pick's hashing,
    # most of which is numpy's overhead per call (~100 blocks at 6 KB).
    blocks = _mix64_into(words @ lanes)
    blocks[0] ^= np.uint64(_seed(model))
    inverse, powers = _powers(count)
    blocks *= inverse
    chain = np.cumsum(blocks, dtype=np.uint64)
    chain *= powers
    hashes: list[int] = _mix64_into(chain).tolist()
    return hashes


class PrefixHasher:
    """`block_hashes` remembered for the most recent distinct prompt beginnings.

    Prompts that share their first `max_blocks` blocks (a long shared system prompt, an
    agent's fixed preamble, retries) have the same hashes: they are looked up by those exact
    bytes instead of recomputed. Keys are at most `max_blocks` x `block_bytes` bytes each.
    """

    def __init__(self, capacity: int = 512) -> None:
        self.capacity = capacity
        self._cache: OrderedDict[tuple[str, int, bytes], tuple[int, ...]] = OrderedDict()

    def hashes(
        self, model: str, segments: Sequence[str], *, block_bytes: int, max_blocks: int
    ) -> tuple[int, ...]:
        data = _leading_bytes(segments, block_bytes * max_blocks)
        count = min(len(data) // block_bytes, max_blocks)
        key = (model, block_bytes, data[: count * block_bytes])
        found = self._cache.get(key)
        if found is not None:
            self._cache.move_to_end(key)
            return found
        hashes = tuple(_hash_blocks(model, data, block_bytes, count))
        self._cache[key] = hashes
        if len(self._cache) > self.capacity:
            self._cache.popitem(last=False)
        return hashes


def mix64(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """A 64-bit finaliser (MurmurHash3's fmix64): every input bit moves every output bit
    (uint64 arithmetic wraps modulo 2^64, as a hash wants). Also `kvcache.blocks`'."""
    values = values ^ (values >> np.uint64(33))
    values = values * _MIX_1
    values = values ^ (values >> np.uint64(33))
    values = values * _MIX_2
    return values ^ (values >> np.uint64(33))


def _mix64_into(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
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
    return _power_table(_BASE_INVERSE, count), _power_table(_BASE, count)


def _power_table(base: int, count: int) -> npt.NDArray[np.uint64]:
    factors = np.full(count, base, dtype=np.uint64)
    factors[0] = 1
    return np.cumprod(factors, dtype=np.uint64)


# Powers of the chain's base, computed once: enough for max_blocks up to 4096.
_POWERS = _power_table(_BASE, 4096)
_INVERSE_POWERS = _power_table(_BASE_INVERSE, 4096)


@functools.lru_cache(maxsize=1024)
def _seed(model: str) -> int:
    return int.from_bytes(hashlib.blake2b(model.encode(), digest_size=8).digest(), "little")


def _leading_bytes(segments: Sequence[str], wanted: int) -> bytes:
    """The UTF-8 of the joined segments, stopping once `wanted` bytes are there: a 1 MiB
    prompt is not encoded whole to hash its first 16 KiB."""
    parts: list[bytes] = []
    total = 0
    for index, segment in enumerate(segments):
        if index:
            parts.append(_SEPARATOR_BYTES)
            total += len(_SEPARATOR_BYTES)
        # "<" first: a one-character search runs at memchr's speed; "<text:" through 48 KB
        # of prose took ~20 µs of the Pick (its letters keep the substring search stepping).
        referenced = "<" in segment and "<text:" in segment
        text = _expand_references(segment, wanted - total) if referenced else segment
        # A character is at most 4 bytes: `wanted` characters always cover `wanted` bytes.
        encoded = text[: wanted - total].encode("utf-8", "surrogatepass")
        parts.append(encoded)
        total += len(encoded)
        if total >= wanted:
            break
    return b"".join(parts)


def _expand_references(segment: str, wanted: int) -> str:
    """Give each `<text:LENGTH:DIGEST>` reference (long text the parser did not copy) the
    length it stands for, filled from its digest, so a 100 KiB shared prompt weighs as many
    blocks as its text would, not one."""

    def expand(match: re.Match[str]) -> str:
        reference, digest = match.group(0), match.group(2)
        length = min(int(match.group(1)), wanted)
        fill = length - len(reference)
        return reference + (digest * (fill // len(digest) + 1))[:fill] if fill > 0 else reference

    return _TEXT_REFERENCE.sub(expand, segment)

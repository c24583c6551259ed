"""Prefix-cache affinity: which workers have probably cached a prompt's leading blocks.

The prompt is cut into fixed-size blocks and each block is named by a hash of everything up to
and including it, seeded by the model (a chain: equal hashes mean equal prefixes), the way the
Gateway API Inference Extension does with 64-character blocks. Each worker has an LRU of the
block hashes routed to it, bounded to roughly what its KV cache can hold; a request's
affinity to a worker is the share of its leading blocks that worker holds.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from pydantic import PositiveInt

from kinference.routing.plugins.config import PluginConfig


class PrefixIndexConfig(PluginConfig):
    """How prompts are cut into blocks for the approximate prefix index (`routing.prefix`)."""

    block_bytes: PositiveInt = 64  # bytes of UTF-8 prompt text per block (GIE: 64)
    # Blocks hashed per request: 64 KiB of leading text, past long shared documents; the
    # hashing is vectorised (~0.1 µs a block) and cached per distinct beginning.
    max_blocks: PositiveInt = 1024
    lru_blocks_per_worker: PositiveInt = 50_000  # block hashes remembered per worker


SEPARATOR = "\x1e"  # between prompt segments, so ("ab", "c") and ("a", "bc") differ
_SEPARATOR_BYTES = SEPARATOR.encode()
# Odd 64-bit constants: the chain's base and its inverse mod 2^64, fmix64's multipliers, and
# one multiplier per 8-byte word of a block (cycled for blocks over 64 bytes).
_BASE = 0x9E3779B97F4A7C15
_BASE_INVERSE = pow(_BASE, -1, 1 << 64)
_MIX_1 = np.uint64(0xFF51AFD7ED558CCD)
_MIX_2 = np.uint64(0xC4CEB9FE1A85EC53)
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
    blocks = _mix((words * lanes).sum(axis=1, dtype=np.uint64))
    blocks[0] ^= np.uint64(_seed(model))
    inverse, powers = _powers(count)
    chain = np.cumsum(blocks * inverse, dtype=np.uint64) * powers
    hashes: list[int] = _mix(chain).tolist()
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


def _mix(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """A 64-bit finaliser (MurmurHash3's fmix64): every input bit moves every output bit."""
    values = values ^ (values >> np.uint64(33))
    values = values * _MIX_1
    values = values ^ (values >> np.uint64(33))
    values = values * _MIX_2
    return values ^ (values >> np.uint64(33))


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
        text = _expand_references(segment, wanted - total) if "<text:" in segment else segment
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


class PrefixIndex:
    """Block hashes per worker slot (LRU-bounded) and the reverse map for matching.

    Eviction-aware: each worker's LRU is bounded by the smaller of `blocks_per_worker` and
    the capacity it was seen to have. When a worker reports fewer cached tokens than the
    index predicted (`shortfall`), the blocks it no longer had leave its entry, and its
    capacity is taken as the age (blocks recorded on it since) of the first missing block;
    a hit on an older block raises the estimate again (`confirmed`).
    """

    def __init__(self, blocks_per_worker: int) -> None:
        self.blocks_per_worker = blocks_per_worker
        self._holders: dict[int, set[int]] = {}
        self._lru: dict[int, OrderedDict[int, int]] = {}  # slot -> block -> touch number
        self._touches: dict[int, int] = {}  # slot -> blocks recorded on it so far
        self.capacity: dict[int, int] = {}  # slot -> estimated blocks it really keeps
        self._last: dict[int, Sequence[int]] = {}  # slot -> the blocks it recorded last
        # The last `match` (its hashes object, the index version, the answer), which `held`
        # reuses at the same Pick; the version counts every change of who holds what.
        self._version = 0
        self._matched: tuple[Sequence[int], int, dict[int, int]] | None = None

    def __len__(self) -> int:
        """Distinct blocks indexed."""
        return len(self._holders)

    def footprint(self, slots: npt.NDArray[np.intp]) -> list[float]:
        """Blocks held per slot: how full each worker's cache is, as far as we know."""
        lru = self._lru
        return [float(len(lru.get(slot, ()))) for slot in slots.tolist()]

    def match(self, hashes: Sequence[int]) -> dict[int, int]:
        """Worker slot -> number of leading blocks of `hashes` it holds (only slots with > 0).

        Blocks are recorded together and the earliest ones refreshed last, so a worker
        holding block i holds blocks 0..i: a binary search per worker finds its longest
        prefix in O(log n) lookups instead of walking every block.
        """
        if not hashes:
            return {}
        first = self._holders.get(hashes[0])
        if not first:
            return {}
        matched = {slot: self._longest(slot, hashes) for slot in first}
        self._matched = (hashes, self._version, matched)
        return matched

    def _longest(self, slot: int, hashes: Sequence[int]) -> int:
        lo, hi = 1, len(hashes)  # slot holds hashes[:lo]; find the largest such lo
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if slot in self._holders.get(hashes[mid - 1], ()):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def record(self, slot: int, hashes: Sequence[int]) -> None:
        """Remember that `slot` now caches these blocks (most recent: the earliest).

        The same blocks recorded again right after themselves (a retry, the same prompt
        twice in a row; the hasher hands back one tuple for one prefix) change nothing: they
        are already the most recent, in order, and push nothing else further back."""
        if hashes and self._last.get(slot) is hashes:
            return
        self._last[slot] = hashes
        self._version += 1
        lru = self._lru.setdefault(slot, OrderedDict())
        touch = self._touches.get(slot, 0)
        for block in reversed(hashes):
            touch += 1
            if block in lru:
                lru.move_to_end(block)
            else:
                self._holders.setdefault(block, set()).add(slot)
            lru[block] = touch
        self._touches[slot] = touch
        self._trim(slot, lru)

    def _trim(self, slot: int, lru: OrderedDict[int, int]) -> None:
        bound = min(self.blocks_per_worker, self.capacity.get(slot, self.blocks_per_worker))
        while len(lru) > bound:
            evicted, _ = lru.popitem(last=False)
            self._drop_holder(evicted, slot)

    def _drop_holder(self, block: int, slot: int) -> None:
        holders = self._holders.get(block)
        if holders is not None:
            holders.discard(slot)
            if not holders:
                del self._holders[block]

    def held(self, slot: int, hashes: Sequence[int]) -> tuple[int, int | None]:
        """(leading blocks of `hashes` that `slot` holds, blocks recorded on it since the
        deepest of them was): read at Pick, before the pick refreshes them."""
        lru = self._lru.get(slot)
        if not hashes or lru is None or hashes[0] not in lru:
            return 0, None
        memo = self._matched
        if memo is not None and memo[0] is hashes and memo[1] == self._version:
            blocks = memo[2].get(slot, 0)  # what `match` found at this Pick
        else:
            blocks = self._longest(slot, hashes)
        return blocks, self._touches.get(slot, 0) - lru[hashes[blocks - 1]]

    def shortfall(self, slot: int, hashes: Sequence[int], kept: int, age: int | None) -> None:
        """`slot` had only the first `kept` blocks of `hashes` cached although the index
        said more, the deepest predicted block being `age` blocks old at the pick: the rest
        leaves its entry. When it kept less than half, its capacity estimate moves toward
        that age, by at most a tenth a time (one report may be misread: a block boundary,
        a prompt rendered differently by the engine)."""
        lru = self._lru.get(slot)
        if lru is None or kept >= len(hashes):
            return
        self._last.pop(slot, None)
        self._version += 1
        held = sum(1 for block in hashes if block in lru)
        for block in hashes[kept:]:
            if lru.pop(block, None) is not None:
                self._drop_holder(block, slot)
        if age is not None and kept < held / 2:
            floor = max(len(hashes), 1)  # never below one prompt's worth
            known = self.capacity.get(slot, self.blocks_per_worker)
            self.capacity[slot] = max(min(known, max(age, int(known * 0.9))), floor)
            self._trim(slot, lru)

    def confirmed(self, slot: int, age: int | None) -> None:
        """`slot` had the predicted blocks cached, the deepest `age` blocks old at the
        pick: a capacity estimate below that age was too small."""
        known = self.capacity.get(slot)
        if known is not None and age is not None and age > known:
            self.capacity[slot] = age

    def forget(self, slot: int) -> None:
        """Drop everything a worker held (it left the pool or restarted)."""
        for block in self._lru.pop(slot, OrderedDict()):
            self._drop_holder(block, slot)
        self._last.pop(slot, None)
        self._version += 1
        self._touches.pop(slot, None)
        self.capacity.pop(slot, None)

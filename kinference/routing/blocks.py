"""Prompt blocks and their chained hashes, the keys of the approximate prefix index.

The prompt is cut into fixed-size blocks and each block is named by a hash of everything up to
and including it, seeded by the model (a chain: equal hashes mean equal prefixes), the way the
Gateway API Inference Extension does with 64-character blocks.
"""

from __future__ import annotations

import re
import sys
from collections import OrderedDict
from collections.abc import Sequence

from kinference.routing.chain import ChainTuple, chain_function, chain_tuple, mix64

__all__ = ["SEPARATOR", "PrefixHasher", "block_hashes", "mix64"]

SEPARATOR = "\x1e"  # between prompt segments, so ("ab", "c") and ("a", "bc") differ
_SEPARATOR_BYTES = SEPARATOR.encode()
_TEXT_REFERENCE = re.compile(r"<text:(\d+):([0-9a-f]+)>")  # see kinference.requests.prompt
# Segments a family keeps of its last prompt at most (a chat of more is hashed afresh each
# time: a body of many tiny messages must not pin a list this long in each of 128 families).
MAX_KNOWN_SEGMENTS = 1024
# Bytes the families keep at most, all together (`_Known.cost`): without it 128 families of
# 64 KiB prompts pin ~25 MB of text, ~90 MB in 4-byte characters, outside any budget. Past
# it the families used longest ago are forgotten (their next prompt is hashed afresh).
MAX_KNOWN_BYTES = 16 << 20
# Bytes the handed-out tuples (`_interned`) keep at most, all together: 512 prompts of
# `max_blocks` hashes each would pin ~21 MB at the default 1024 blocks and ten times that
# where a pool hashes 10k blocks. Past it the tuples handed out longest ago are dropped (a
# prompt recorded again then gets a new tuple, and the index compares values).
MAX_INTERNED_BYTES = 8 << 20
_HASH_BYTES = 40  # a tuple's pointer and an int object per hash (the index shares most)


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
    return list(chain_tuple(model, data, block_bytes, min(len(data) // block_bytes, max_blocks)))


class _Known:
    """A prompt hashed last in its family: its segments as far as encoded, their UTF-8
    (`ends`: the length after each) and its hashes."""

    __slots__ = ("cost", "data", "ends", "hashes", "segments")

    def __init__(
        self, segments: Sequence[str], data: bytes, ends: list[int], hashes: tuple[int, ...]
    ) -> None:
        self.segments, self.data, self.ends, self.hashes = segments, data, ends, hashes
        # What keeping it pins, about: its strings as CPython sizes them, their UTF-8, the
        # lengths and the hashes.
        text = sum(map(sys.getsizeof, segments))
        self.cost = text + len(data) + 8 * len(ends) + _HASH_BYTES * len(hashes)


class PrefixHasher:
    """`block_hashes`, continued from the last prompt that began alike, one tuple a prefix.

    Prompts come in families sharing a beginning: a chat's turns, the questions about one
    document, the users of one system prompt. The last prompt hashed per family (the model,
    the block size and cap, the first segment's first `block_bytes` characters; the last
    `capacity // 4` families) keeps its segments, their UTF-8 and its hashes: a prompt
    encodes only the segments that differ from that one's and hashes only from the first
    block where the bytes part, its chain continued from the hash before (a new question
    about a 48 KB document: its own few blocks, not ~750, and its leading hashes are the
    same int objects, which the prefix index then finds by identity). The hashes of the
    last `capacity` distinct prefixes (within `max_interned_bytes`) are handed out as one
    tuple each (`_cache`, keyed by the count and the last chained hash): the prefix index
    knows a prompt recorded twice in a row by that tuple's identity. The chain is computed
    in C where the extension is built (`kinference.native`; `native=False`: in Python).
    """

    def __init__(
        self,
        capacity: int = 512,
        max_known_bytes: int = MAX_KNOWN_BYTES,
        max_interned_bytes: int = MAX_INTERNED_BYTES,
        *,
        native: bool = True,
    ) -> None:
        self._chain: ChainTuple = chain_function(native)
        self.capacity = capacity
        self.max_known_bytes = max_known_bytes
        self.max_interned_bytes = max_interned_bytes
        self._cache: OrderedDict[tuple[str, int, int, int], tuple[int, ...]] = OrderedDict()
        self._interned_bytes = 0  # `_HASH_BYTES` per hash of the tuples in `_cache`
        self._known: OrderedDict[tuple[str, int, int, str], _Known] = OrderedDict()
        self._known_bytes = 0  # the sum of the kept families' costs

    @property
    def known_bytes(self) -> int:
        """What the families' last prompts pin now (bytes, about: `_Known.cost`)."""
        return self._known_bytes

    @property
    def interned_bytes(self) -> int:
        """What the handed-out tuples pin now (bytes, about: `_HASH_BYTES` a hash)."""
        return self._interned_bytes

    def hashes(
        self, model: str, segments: Sequence[str], *, block_bytes: int, max_blocks: int
    ) -> tuple[int, ...]:
        if not segments:
            return ()
        family = (model, block_bytes, max_blocks, segments[0][:block_bytes])
        known = self._known.get(family)
        if known is not None and _repeated(segments, known, block_bytes * max_blocks):
            self._known.move_to_end(family)  # the same prompt again (a retry, a benchmark)
            return self._interned(
                (model, block_bytes, len(known.hashes), known.hashes[-1]), known.hashes
            )
        data, ends, equal = _encoded(segments, block_bytes * max_blocks, known)
        count = min(len(data) // block_bytes, max_blocks)
        if count == 0:
            return ()
        if known is None:
            hashes = self._chain(model, data, block_bytes, count)
        else:
            hashes = self._continued(
                model, data, block_bytes, count, known=known, equal=equal // block_bytes
            )
        kept = _bounded(segments, len(ends), block_bytes * max_blocks)
        self._remember(family, None if kept is None else _Known(kept, data, ends, hashes))
        return self._interned((model, block_bytes, count, hashes[-1]), hashes)

    def _continued(
        self, model: str, data: bytes, block_bytes: int, count: int, *, known: _Known, equal: int
    ) -> tuple[int, ...]:
        """The hashes of `count` blocks of `data`, whose first `equal` are `known`'s:
        `known`'s as far as the bytes agree, the rest chained on from there."""
        same = _same_blocks(data, known, block_bytes, count, equal)
        if same == len(known.hashes) == count:
            return known.hashes
        return self._chain(model, data, block_bytes, count, known=known.hashes, same=same)

    def _remember(self, family: tuple[str, int, int, str], known: _Known | None) -> None:
        """Keep `known` as its family's last prompt (None, or one costing more than all may:
        forget the family's), then forget the oldest families past the count or the bytes."""
        previous = self._known.pop(family, None)
        if previous is not None:
            self._known_bytes -= previous.cost
        if known is None or known.cost > self.max_known_bytes:
            return
        self._known[family] = known
        self._known_bytes += known.cost
        families = max(self.capacity // 4, 1)
        while len(self._known) > families or self._known_bytes > self.max_known_bytes:
            self._known_bytes -= self._known.popitem(last=False)[1].cost

    def _interned(self, key: tuple[str, int, int, int], hashes: tuple[int, ...]) -> tuple[int, ...]:
        """The one tuple handed out for these hashes (chained: equal last hashes at equal
        counts are equal prefixes, as everywhere in the prefix index)."""
        found = self._cache.get(key)
        if found is not None:
            self._cache.move_to_end(key)
            return found
        cost = _HASH_BYTES * len(hashes)
        if cost > self.max_interned_bytes:
            return hashes  # handed out, not kept
        self._cache[key] = hashes
        self._interned_bytes += cost
        while len(self._cache) > self.capacity or self._interned_bytes > self.max_interned_bytes:
            self._interned_bytes -= _HASH_BYTES * len(self._cache.popitem(last=False)[1])
        return hashes


def _bounded(segments: Sequence[str], count: int, wanted: int) -> Sequence[str] | None:
    """The first `count` segments as a family keeps them, so that what it pins stays within
    about twice `wanted` characters and `MAX_KNOWN_SEGMENTS` strings whatever the request
    (a segment cut at `wanted` is kept cut: it then never equals the whole one, which is
    encoded again, up to `wanted` bytes), or None past that many segments (not kept)."""
    if count > MAX_KNOWN_SEGMENTS:
        return None
    return tuple(s if len(s) <= wanted else s[:wanted] for s in segments[:count])


def _repeated(segments: Sequence[str], known: _Known, wanted: int) -> bool:
    """Whether `segments` encode to `known`'s bytes as far as they are hashed."""
    encoded = len(known.ends)
    whole = encoded == len(segments) or known.ends[-1] >= wanted
    return whole and segments[:encoded] == known.segments


def _same_blocks(data: bytes, known: _Known, block_bytes: int, count: int, equal: int) -> int:
    """How many of the first `count` blocks of `data` equal `known`'s, the first `equal`
    known to: compares in C, all the rest at once, then by halves."""
    blocks = min(count, len(known.hashes))
    lo, theirs = min(equal, blocks), memoryview(known.data)
    if data.startswith(theirs[lo * block_bytes : blocks * block_bytes], lo * block_bytes):
        return blocks
    hi = blocks - 1  # blocks [0, lo) are equal and one in [lo, hi] differs
    while lo < hi:
        mid = (lo + hi) // 2
        if data.startswith(theirs[lo * block_bytes : (mid + 1) * block_bytes], lo * block_bytes):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _leading_bytes(segments: Sequence[str], wanted: int) -> bytes:
    """The UTF-8 of the joined segments, stopping once `wanted` bytes are there: a 1 MiB
    prompt is not encoded whole to hash its first 16 KiB."""
    return _encoded(segments, wanted, None)[0]


def _encoded(
    segments: Sequence[str], wanted: int, known: _Known | None
) -> tuple[bytes, list[int], int]:
    """`_leading_bytes`, the length after each segment encoded, and how many leading bytes
    are `known`'s: those of the leading segments equal to `known`'s, taken from it (the
    same text after the same bytes encodes the same; a 48 KB document with one non-ASCII
    letter takes ~19 µs to encode, ~2 to compare)."""
    parts: list[bytes | memoryview] = []
    ends: list[int] = []
    total = reused = equal = 0
    if known is not None:
        limit = min(len(segments), len(known.ends))
        while reused < limit and segments[reused] == known.segments[reused]:
            reused += 1
        if reused:
            total = equal = known.ends[reused - 1]
            parts.append(memoryview(known.data)[:total])
            ends.extend(known.ends[:reused])
    for index in range(reused, len(segments)):
        if total >= wanted:
            break
        if index:
            parts.append(_SEPARATOR_BYTES)
            total += len(_SEPARATOR_BYTES)
        segment = segments[index]
        # "<" first: a one-character search runs at memchr's speed; "<text:" through 48 KB
        # of prose took ~20 µs of the Pick (its letters keep the substring search stepping).
        referenced = "<" in segment and "<text:" in segment
        text = _expand_references(segment, wanted - total) if referenced else segment
        # A character is at most 4 bytes: `wanted` characters always cover `wanted` bytes.
        encoded = text[: wanted - total].encode("utf-8", "surrogatepass")
        parts.append(encoded)
        total += len(encoded)
        ends.append(total)
    return b"".join(parts), ends, equal


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

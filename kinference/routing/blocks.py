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
    (`ends`: the length after each; the family's next prompt rewrites it in place from
    where they part) and its hashes."""

    __slots__ = ("cost", "data", "ends", "hashes", "segments")

    def __init__(
        self, segments: Sequence[str], data: bytearray, ends: list[int], hashes: tuple[int, ...]
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
        wanted = block_bytes * max_blocks
        family = (model, block_bytes, max_blocks, segments[0][:block_bytes])
        known = self._known.get(family)
        reused = 0 if known is None else _reused(segments, known)
        if (
            known is not None
            and reused == len(known.ends)
            and (reused == len(segments) or known.ends[-1] >= wanted)
        ):
            self._known.move_to_end(family)  # the same prompt again (a retry, a benchmark)
            key = (model, block_bytes, len(known.hashes), known.hashes[-1])
            return self._interned(key, known.hashes)
        equal = known.ends[reused - 1] if known is not None and reused else 0
        tail, ends = _tail(segments, reused, equal, wanted)
        count = min((equal + len(tail)) // block_bytes, max_blocks)
        if count == 0:
            return ()
        if known is None:
            data, hashes = tail, self._chain(model, tail, block_bytes, count)
        else:  # the family's bytes become this prompt's, in place: only the tail is written
            data, hashes = known.data, known.hashes
            same = _same_blocks(data, tail, equal, block_bytes, min(count, len(hashes)))
            data[equal:] = tail
            if not same == len(hashes) == count:
                try:
                    hashes = self._chain(model, data, block_bytes, count, known=hashes, same=same)
                except BaseException:
                    self._remember(family, None)  # its bytes are no longer its hashes'
                    raise
            ends = known.ends[:reused] + ends
        kept = _bounded(segments, known, reused, len(ends), wanted)
        self._remember(family, None if kept is None else _Known(kept, data, ends, hashes))
        return self._interned((model, block_bytes, count, hashes[-1]), hashes)

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


def _bounded(
    segments: Sequence[str], known: _Known | None, reused: int, count: int, wanted: int
) -> Sequence[str] | None:
    """The first `count` segments as a family keeps them (the `reused` leading ones equal to
    `known`'s are `known`'s), so that what it pins stays within about twice `wanted`
    characters and `MAX_KNOWN_SEGMENTS` strings whatever the request (a segment cut at
    `wanted` is kept cut: it then never equals the whole one, which is encoded again, up to
    `wanted` bytes), or None past that many segments (not kept)."""
    if count > MAX_KNOWN_SEGMENTS:
        return None
    new = tuple(s if len(s) <= wanted else s[:wanted] for s in segments[reused:count])
    return new if known is None or not reused else tuple(known.segments[:reused]) + new


def _reused(segments: Sequence[str], known: _Known) -> int:
    """How many leading segments equal `known`'s (the same text after the same bytes
    encodes the same: their bytes are `known`'s; a 48 KB document with one non-ASCII letter
    takes ~19 µs to encode, ~2 to compare)."""
    theirs, reused = known.segments, 0
    limit = min(len(segments), len(theirs))
    while reused < limit and segments[reused] == theirs[reused]:
        reused += 1
    return reused


def _same_blocks(
    data: bytearray, tail: bytearray, equal: int, block_bytes: int, blocks: int
) -> int:
    """How many of the first `blocks` blocks are equal in `data` and in `data[:equal] +
    tail`: compares in C, all the rest at once, then by halves."""
    lo = min(equal // block_bytes, blocks)
    if blocks * block_bytes <= equal:
        return blocks
    theirs = bytes(data[lo * block_bytes : blocks * block_bytes])
    ours = memoryview(tail)
    shift = equal - lo * block_bytes  # theirs[:shift] is equal: data[lo * block_bytes:equal]
    if ours.nbytes >= len(theirs) - shift and theirs.startswith(ours[: len(theirs) - shift], shift):
        return blocks
    hi, base = blocks - 1, lo  # blocks [base, lo) are equal and one in [lo, hi] differs
    while lo < hi:
        mid = (lo + hi) // 2
        end = (mid + 1 - base) * block_bytes - shift
        if ours.nbytes >= end and theirs.startswith(ours[:end], shift):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _leading_bytes(segments: Sequence[str], wanted: int) -> bytearray:
    """The UTF-8 of the joined segments, stopping once `wanted` bytes are there: a 1 MiB
    prompt is not encoded whole to hash its first 16 KiB."""
    return _tail(segments, 0, 0, wanted)[0]


def _tail(
    segments: Sequence[str], first: int, total: int, wanted: int
) -> tuple[bytearray, list[int]]:
    """`_leading_bytes` of the segments from `first` on, `total` bytes being before them
    (their separator included), and the length after each segment encoded."""
    parts: list[bytes] = []
    ends: list[int] = []
    for index in range(first, len(segments)):
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
    return bytearray().join(parts), ends


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

"""A conversation's next turn resumes where the previous turn's tokenization passed.

Every turn resends the history, so its rendered text begins with the previous turn's text
up to near that one's end. Its pieces are known (`reuse.PieceCache`), but walking them again
(finding each cut, naming and looking up each piece) costs tens of microseconds a piece in
Python: ~3 ms per 64 KiB turn. Instead, a tokenization leaves a `Mark` at its last
checked cut P at each stop (where its Pick found no worker holding the prompt further, and
at the end of its text: its tokens, blocks and pieces up to P), and a
prompt whose text up to P + `CHECK_CHARS` is the same starts from there: the pieces before
P, their tokens and the check of the cut at P depend on nothing after P + `CHECK_CHARS`.

A tokenization that reaches its text's end also leaves a mark there (`Mark.ends`: all its
tokens). The next turn's text goes on past that end, and the cut there was never checked
(what follows was not known), so such a mark is taken only where the next text's cut at it
is a candidate and checks good (`find`'s `cut_ok`, `pieces.Cutter.can_cut_at`): then the
turn tokenizes only its new text, not the previous turn's last piece again with it (that
piece ended at the text's end, so its tokens are those of its text alone, as a piece's
between two checked cuts are). A tokenization also leaves such an open mark (`ends`) where a
message ends (`pieces`: `opens`): a new conversation on the same first messages (a system
prompt) resumes there, whatever follows, where the cut checks good on its own text. Every
earlier cut is at least `CHECK_CHARS` before it, so their checks hold for that text too.

Marks are found by a digest of the text's kind and first `LEAD_CHARS` (the lineage: a
system prompt or a conversation's start), then, among that lineage's few marks, furthest
first, by comparing the text up to each one's P + `CHECK_CHARS` with the text the mark was
left on (a compare of the few characters before that end first, then of the whole prefix:
a memory compare, where hashing the prompt to each mark's end cost ~0.2 ms a 64 KiB turn).
Marks are still keyed by the digest of that prefix (the same prefix's mark replaces the
older one), and each keeps the digest's state there: a tokenization leaves its marks at
growing positions of one text and hands its `PrefixDigest` over, so each mark's digest goes
on from the previous one's (or from the state of the mark it resumed at) instead of hashing
the text from its start again (at every background slice of a long prompt that was
quadratic: a 1 MiB prompt hashed ~256 MiB).
Bounded in marks; used from the tokenizer's one thread (or with its work lock held).
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar, overload

from kinference.kvcache.blocks import BlockId
from kinference.tokenize.pieces import CHECK_CHARS, Ids

LEAD_CHARS = 256  # the text's start naming its lineage
MAX_MARKS = 512  # marks kept in all, least recently used lineages dropped
MAX_TOKENS = 4_000_000  # tokens the kept marks hold (their ids and blocks), at most
MAX_PER_LINEAGE = 64  # marks per lineage (conversations on one system prompt), oldest dropped
# Bytes of the texts the kept marks were left on (each text counted once, as CPython sizes
# it): a mark keeps its text to compare the next one with, and a mark near the start of a
# 4 MiB prompt would otherwise pin all of it with a few hundred tokens counted.
MAX_TEXT_BYTES = 64 * 1024 * 1024
T = TypeVar("T")
_Key = tuple[int, bool, bytes]  # a mark's position, `Mark.ends` and its text's digest


@dataclass(frozen=True, slots=True)
class Mark:
    """A tokenization's state at a checked cut (`position`, in characters)."""

    position: int
    made: int  # pieces cut before it
    steps: int  # steps taken (the next step's size grows with them)
    tokens: int
    blocks: Sequence[BlockId]  # full blocks before it
    tail: Ids  # tokens after the last full block
    parts: Sequence[Ids]  # each piece's ids before it
    # At its text's end or a message's end: its cut is checked on the text resuming there.
    ends: bool = False

    @property
    def through(self) -> int:
        """The end of the text its key holds (and a text resuming there must share)."""
        return self.position if self.ends else self.position + CHECK_CHARS


@dataclass(frozen=True, slots=True)
class _Kept:
    """A mark, the text it was left on and the digest's state at `Mark.through` there."""

    mark: Mark
    text: str
    state: tuple[int, hashlib.blake2b]

    def fits(self, text: str) -> bool:
        """Whether `text` up to the mark's `through` is the one the mark was left on."""
        end, kept = self.mark.through, self.text
        low = max(end - CHECK_CHARS, 0)
        if end > len(text) or text[low:end] != kept[low:end]:
            return False
        return kept is text or text.startswith(kept if end == len(kept) else kept[:end])


class TurnMarks:
    """Marks by lineage, then by (position, at a text's end, digest of the text to
    `Mark.through`)."""

    def __init__(
        self,
        max_marks: int = MAX_MARKS,
        max_tokens: int = MAX_TOKENS,
        max_text_bytes: int = MAX_TEXT_BYTES,
    ) -> None:
        self.max_marks, self.max_tokens = max_marks, max_tokens
        self.max_text_bytes = max_text_bytes
        self._texts: dict[int, int] = {}  # id of a kept text -> marks keeping it
        self._text_bytes = 0  # of the kept texts, each once
        # lineage -> (position, at a text's end, digest of the text to `Mark.through`) -> mark
        self._lineages: OrderedDict[bytes, dict[_Key, _Kept]] = OrderedDict()
        # lineage -> its keys furthest first (`find`'s order, kept sorted by `put`): a Pick's
        # `find` walks a lineage of up to `MAX_PER_LINEAGE` marks without sorting them.
        self._order: dict[bytes, list[tuple[int, bool, _Key]]] = {}
        self._count = 0
        self._tokens = 0  # held by the kept marks
        self.resumed = 0  # prompts that started from a mark

    def __len__(self) -> int:
        return self._count

    def find(
        self,
        kind: bytes,
        text: str,
        prefix: PrefixDigest | None = None,
        cut_ok: Callable[[int], bool] | None = None,
        beyond: int = 0,
    ) -> Mark | None:
        """The mark furthest into `text` (and past `beyond`) whose text up to it is this
        text's, if any; a mark at an earlier text's end only if `cut_ok(its position)` (the
        cut there is good in `text`). `prefix` (of `kind` and `text`): left at the mark
        found, for the caller's `put`s."""
        prefix = prefix or PrefixDigest(kind, text)
        lineage = self._lineages.get(prefix.lead)
        if not lineage:
            return None
        order = self._order[prefix.lead]
        # Furthest first, from the last position a mark may be at: at most one mark of a
        # position (and kind) fits a text (their digests differ), so ties' order is moot.
        for negative, _, key in itertools.islice(
            order, bisect.bisect_left(order, (CHECK_CHARS - len(text),)), None
        ):
            if -negative <= beyond:
                break
            found = lineage[key]
            if not found.fits(text):
                continue
            if found.mark.ends and (cut_ok is None or not cut_ok(found.mark.position)):
                continue
            prefix.restore(found.state)
            self.resumed += 1
            self._lineages.move_to_end(prefix.lead)
            # The newest of its lineage now: the lineage drops its oldest first, and a mark
            # every new conversation resumes at (a system prompt's end) is not left again.
            lineage[key] = lineage.pop(key)
            return found.mark
        return None

    def put(self, kind: bytes, text: str, mark: Mark, prefix: PrefixDigest | None = None) -> None:
        """`prefix` (of `kind` and `text`): cheapest when marks come at growing positions."""
        end = mark.through
        if mark.position <= 0 or end > len(text):
            return
        prefix = prefix or PrefixDigest(kind, text)
        lead = prefix.lead
        lineage = self._lineages.setdefault(lead, {})
        self._lineages.move_to_end(lead)
        key = (mark.position, mark.ends, prefix.at(end))
        replaced = lineage.pop(key, None)
        if replaced is not None:
            self._drop(replaced)
        else:
            bisect.insort(self._order.setdefault(lead, []), (-mark.position, mark.ends, key))
        lineage[key] = _Kept(mark, text, prefix.checkpoint())
        self._count, self._tokens = self._count + 1, self._tokens + mark.tokens
        self._keep_text(text)
        if len(lineage) > MAX_PER_LINEAGE:
            self._drop_oldest(lead, lineage)
        while self._over():
            # The oldest mark of the least recently used lineage, not its whole lineage: at
            # 1 MiB a mark holds ~250k tokens, and dropping the lineage that just went over
            # the bound (the only one, under one long shared system prompt) dropped every
            # mark, so each next turn walked its whole history again.
            lead, oldest = next(iter(self._lineages.items()))
            self._drop_oldest(lead, oldest)
            if not oldest:
                del self._lineages[lead], self._order[lead]

    def _drop_oldest(self, lead: bytes, lineage: dict[_Key, _Kept]) -> None:
        key = next(iter(lineage))
        self._drop(lineage.pop(key))
        self._order[lead].remove((-key[0], key[1], key))

    @property
    def text_bytes(self) -> int:
        """What the kept marks' texts take (bytes, each text once)."""
        return self._text_bytes

    def _over(self) -> bool:
        return (
            self._count > self.max_marks
            or self._tokens > self.max_tokens
            or self._text_bytes > self.max_text_bytes
        )

    def _keep_text(self, text: str) -> None:
        held = self._texts.get(id(text), 0)
        if not held:
            self._text_bytes += sys.getsizeof(text)
        self._texts[id(text)] = held + 1

    def _drop(self, kept: _Kept) -> None:
        self._count, self._tokens = self._count - 1, self._tokens - kept.mark.tokens
        held = self._texts.pop(id(kept.text))
        if held > 1:
            self._texts[id(kept.text)] = held - 1
        else:
            self._text_bytes -= sys.getsizeof(kept.text)


class Leading(Sequence[T]):
    """The first `count` items of a list that is only ever appended to, not copied: a
    mark's blocks and parts (a long prompt leaves a mark per background slice, hundreds,
    and copying each one's blocks was quadratic too)."""

    __slots__ = ("_count", "_items")

    def __init__(self, items: list[T], count: int) -> None:
        self._items, self._count = items, min(count, len(items))

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...
    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        if isinstance(index, slice):
            return self._items[: self._count][index]
        return self._items[range(self._count)[index]]

    def __iter__(self) -> Iterator[T]:
        return itertools.islice(self._items, self._count)


class PrefixDigest:
    """Digests of `kind` and the UTF-8 of `text[:end]` for growing ends, each going on
    from the previous one (a smaller end starts over from the text's start)."""

    def __init__(self, kind: bytes, text: str) -> None:
        self._kind, self._text = kind, text
        self._digest, self._done = hashlib.blake2b(kind, digest_size=16), 0
        self._lead: bytes | None = None

    @property
    def lead(self) -> bytes:
        """The lineage: the digest of the kind and the text's first `LEAD_CHARS`."""
        if self._lead is None:
            self._lead = _lead(self._kind, self._text)
        return self._lead

    def at(self, end: int) -> bytes:
        if end < self._done:
            self.restore((0, hashlib.blake2b(self._kind, digest_size=16)))
        self._digest.update(self._text[self._done : end].encode("utf-8", "surrogatepass"))
        self._done = end
        return self._digest.copy().digest()

    def checkpoint(self) -> tuple[int, hashlib.blake2b]:
        return self._done, self._digest.copy()

    def restore(self, checkpoint: tuple[int, hashlib.blake2b]) -> None:
        self._done, self._digest = checkpoint[0], checkpoint[1].copy()


def _lead(kind: bytes, text: str) -> bytes:
    digest = hashlib.blake2b(kind, digest_size=16)
    digest.update(text[:LEAD_CHARS].encode("utf-8", "surrogatepass"))
    return digest.digest()

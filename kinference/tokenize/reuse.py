"""Tokenizations reused across a conversation's turns.

Every turn resends the whole history, so turn k+1's prompt text starts with turn k's. The
text is cut into `CHUNK_CHARS` chunks named by a chained digest (equal digests, equal text
up to there); each tokenized prompt is remembered under every chunk boundary it reaches.
A new prompt looks up its longest known boundary, keeps the known tokens up to a cut a
little before it and tokenizes only the rest. The result is checked where the two overlap
(the tokens between the cut and the boundary must come out the same), else the prompt is
tokenized whole: reuse never changes the tokens, it only saves time.

Not thread-safe: one tokenizer thread owns it.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

CHUNK_CHARS = 2048
_MARGIN_CHARS = 64  # the cut sits this far before the known boundary; the overlap is checked

Encoded = tuple[npt.NDArray[np.uint32], npt.NDArray[np.int64]]  # token ids, start offsets
Encoder = Callable[[str, bool], Encoded]  # (text, add_special_tokens) -> Encoded


@dataclass(slots=True)
class _Entry:
    ids: npt.NDArray[np.uint32]
    starts: npt.NDArray[np.int64]
    keys: list[bytes]


def boundaries(kind: bytes, text: str) -> list[bytes]:
    """The chained digest of `text` at every full chunk boundary, in order."""
    digest = hashlib.blake2b(kind, digest_size=16)
    result = []
    for start in range(0, len(text) - CHUNK_CHARS + 1, CHUNK_CHARS):
        digest.update(text[start : start + CHUNK_CHARS].encode("utf-8", "surrogatepass"))
        result.append(digest.copy().digest())
    return result


class TurnCache:
    """Known tokenizations by chunk boundary, LRU-bounded in tokens held."""

    def __init__(self, max_tokens: int = 4_000_000) -> None:
        self.max_tokens = max_tokens
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._by_key: dict[bytes, tuple[int, int]] = {}  # digest -> (entry id, chunk count)
        self._held = 0
        self._next = 0
        self.reused_tokens = 0  # tokens taken from earlier turns instead of tokenized
        self.encoded_chars = 0  # characters actually tokenized

    def encode(self, text: str, special: bool, encoder: Encoder) -> Encoded:
        kind = b"special" if special else b"plain"
        keys = boundaries(kind, text)
        encoded = self._reuse(text, special, keys, encoder)
        if encoded is None:
            self.encoded_chars += len(text)
            encoded = encoder(text, special)
        self._remember(encoded, keys)
        return encoded

    def _reuse(
        self, text: str, special: bool, keys: list[bytes], encoder: Encoder
    ) -> Encoded | None:
        for key in reversed(keys):
            found = self._by_key.get(key)
            if found is not None:
                break
        else:
            return None
        entry_id, chunks = found
        entry = self._entries[entry_id]
        self._entries.move_to_end(entry_id)
        known = chunks * CHUNK_CHARS
        keep = max(int(np.searchsorted(entry.starts, known - _MARGIN_CHARS)) - 1, 0)
        cut = int(entry.starts[keep]) if keep < len(entry.starts) else known
        if keep == 0 or cut <= 0:
            return None
        ids, starts = encoder(text[cut:], False)
        starts = starts + cut
        if not _overlap_agrees(entry, keep, ids, starts, known - _MARGIN_CHARS // 4):
            return None
        self.encoded_chars += len(text) - cut
        self.reused_tokens += keep
        return np.concatenate((entry.ids[:keep], ids)), np.concatenate(
            (entry.starts[:keep], starts)
        )

    def _remember(self, encoded: Encoded, keys: list[bytes]) -> None:
        ids, starts = encoded
        if not keys or len(ids) > self.max_tokens:
            return
        entry_id, self._next = self._next, self._next + 1
        self._entries[entry_id] = _Entry(ids, starts, keys)
        for count, key in enumerate(keys, start=1):
            self._by_key[key] = (entry_id, count)
        self._held += len(ids)
        while self._held > self.max_tokens:
            old_id, old = self._entries.popitem(last=False)
            self._held -= len(old.ids)
            for key in old.keys:
                if self._by_key.get(key, (-1, 0))[0] == old_id:
                    del self._by_key[key]


def _overlap_agrees(
    entry: _Entry,
    keep: int,
    ids: npt.NDArray[np.uint32],
    starts: npt.NDArray[np.int64],
    until: int,
) -> bool:
    """Whether the fresh tokens starting before `until` equal the known ones from `keep`."""
    known_end = int(np.searchsorted(entry.starts, until))
    fresh_end = int(np.searchsorted(starts, until))
    if known_end - keep != fresh_end or fresh_end == 0:
        return False
    return bool(
        np.array_equal(entry.ids[keep:known_end], ids[:fresh_end])
        and np.array_equal(entry.starts[keep:known_end], starts[:fresh_end])
    )

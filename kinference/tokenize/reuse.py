"""Tokenized pieces kept for the prompts that come back with them.

Every conversation turn resends the whole history, and many prompts start with the same
system prompt or document; cut at the same checked places (`pieces.Cutter` cuts from the
start), those prompts share their leading pieces, named by a digest of the text their tokens
depend on. So a later turn tokenizes only its new pieces: the known ones are looked up here.
LRU-bounded in tokens held. Not thread-safe: one tokenizer thread owns it.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import numpy.typing as npt

Ids = npt.NDArray[np.uint32]


class PieceCache:
    """Piece name -> its token ids, the least recently used dropped past `max_tokens`."""

    def __init__(self, max_tokens: int = 4_000_000) -> None:
        self.max_tokens = max_tokens
        self._pieces: OrderedDict[bytes, Ids] = OrderedDict()
        self._held = 0
        self.hits = 0  # pieces taken from here instead of tokenized
        self.encoded_chars = 0  # characters actually tokenized

    def __len__(self) -> int:
        return len(self._pieces)

    @property
    def held_tokens(self) -> int:
        return self._held

    def get(self, name: bytes) -> Ids | None:
        found = self._pieces.get(name)
        if found is not None:
            self._pieces.move_to_end(name)
            self.hits += 1
        return found

    def put(self, name: bytes, ids: Ids, chars: int) -> None:
        self.encoded_chars += chars
        if len(ids) > self.max_tokens or name in self._pieces:
            return
        self._pieces[name] = ids
        self._held += len(ids)
        while self._held > self.max_tokens:
            _, old = self._pieces.popitem(last=False)
            self._held -= len(old)

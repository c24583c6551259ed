"""Random request ids: non-zero, unguessable, never reused while in use."""

from __future__ import annotations

import os
import weakref
from collections.abc import Container

_ID_BYTES = 8  # 64-bit ids
DRAW_BYTES = 4096  # what one OS CSPRNG read gives: 512 ids


class IdSource:
    """Fresh 64-bit ids from the OS CSPRNG, sliced from one read of `draw_bytes` at a time.

    Ids name process-local state to callers; sequential ids would let one caller guess and
    pull another caller's body, so they come from `os.urandom`, not a counter. A read per
    id was a getrandom system call on every push and every Pick (~1 µs warm, ~10 in a busy
    gateway); one read of 4 KiB serves 512 ids, each handed out once (`list.pop` is atomic,
    so callers on several threads never get the same one). A forked child forgets the ids
    it inherited, which its parent hands out too.
    """

    __slots__ = ("__weakref__", "_draw_bytes", "_ids")

    def __init__(self, draw_bytes: int = DRAW_BYTES) -> None:
        if draw_bytes < _ID_BYTES or draw_bytes % _ID_BYTES:
            raise ValueError(f"draw_bytes must be a positive multiple of {_ID_BYTES}")
        self._draw_bytes = draw_bytes
        self._ids: list[int] = []
        source = weakref.ref(self)

        def forget() -> None:
            kept = source()
            if kept is not None:
                kept._ids = []

        os.register_at_fork(after_in_child=forget)

    @property
    def buffered(self) -> int:
        """Ids drawn and not handed out yet."""
        return len(self._ids)

    def new_id(self, in_use: Container[int]) -> int:
        """An id that is not 0 and not in `in_use`."""
        ids = self._ids
        while True:
            try:
                candidate = ids.pop()
            except IndexError:
                ids = self._ids = memoryview(os.urandom(self._draw_bytes)).cast("Q").tolist()
                continue
            if candidate != 0 and candidate not in in_use:
                return candidate

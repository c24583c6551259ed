"""Random request ids: non-zero, unguessable, never reused while in use."""

from __future__ import annotations

import os
from collections.abc import Container

_ID_BYTES = 8  # 64-bit ids
_DRAWN_BYTES = 64 * _ID_BYTES  # OS CSPRNG bytes fetched at once: 64 ids per system call


class _Entropy:
    """Bytes of the OS CSPRNG (`os.urandom`, as `secrets` uses), fetched 512 at a time: a
    getrandom call per id cost the server ~2-3 µs of its loop per id (docs/benchmarks.md,
    h76). A forked child starts over, so it never hands out its parent's next ids."""

    def __init__(self) -> None:
        self._bytes = b""
        self._at = 0

    def draw(self) -> int:
        """A uniformly random 64-bit integer."""
        at = self._at
        if at + _ID_BYTES > len(self._bytes):
            self._bytes, at = os.urandom(_DRAWN_BYTES), 0
        self._at = at + _ID_BYTES
        return int.from_bytes(self._bytes[at : at + _ID_BYTES], "little")

    def forget(self) -> None:
        self._bytes, self._at = b"", 0


_entropy = _Entropy()
os.register_at_fork(after_in_child=_entropy.forget)


def new_id(in_use: Container[int]) -> int:
    """A fresh 64-bit id from the OS CSPRNG that is not 0 and not in `in_use`.

    Ids name process-local state to callers; sequential ids would let one caller guess and
    pull another caller's body, so they come from the OS CSPRNG, not a counter.
    """
    while True:
        candidate = _entropy.draw()
        if candidate != 0 and candidate not in in_use:
            return candidate

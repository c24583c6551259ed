"""Random request ids: non-zero, unguessable, never reused while in use."""

from __future__ import annotations

import secrets
from collections.abc import Container

_ID_BITS = 64


def new_id(in_use: Container[int]) -> int:
    """A fresh 64-bit id from the OS CSPRNG that is not 0 and not in `in_use`.

    Ids name process-local state to callers; sequential ids would let one caller guess and
    pull another caller's body, so they come from `secrets`, not a counter.
    """
    while True:
        candidate = secrets.randbits(_ID_BITS)
        if candidate != 0 and candidate not in in_use:
            return candidate

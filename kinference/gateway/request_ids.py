"""The id each request carries through the gateway, the picker's logs and the upstream.

A client's own `x-request-id` is kept when it is short printable ASCII; otherwise the
gateway makes one: 128 random bits as 32 hex digits (the form of a UUID4's hex). They come
from a generator seeded once from the OS, not from `uuid.uuid4()`, which asks the kernel for
every id (a system call per request). An id names a request in logs; it is no credential,
so a generator that is fast rather than cryptographic serves.
"""

from __future__ import annotations

import random
from typing import Any

MAX_CLIENT_ID = 128  # a longer client x-request-id is replaced, not forwarded


class RequestIds:
    """Request ids for one gateway."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()  # seeded from os.urandom

    def new(self) -> str:
        return f"{self._rng.getrandbits(128):032x}"

    def of(self, scope: dict[str, Any]) -> str:
        """The client's `x-request-id` when it is short printable ASCII, else a new one."""
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                if 0 < len(value) <= MAX_CLIENT_ID and value.isascii():
                    text: str = value.decode("ascii")
                    if text.isprintable():
                        return text
                break
        return self.new()

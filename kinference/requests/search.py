"""Searches of a body's piece (`bytes`, or a `memoryview` of a received chunk) at C speed:
`bytes.find` (memchr) where it can, a compiled regex over the buffer otherwise."""

from __future__ import annotations

import re

from kinference.bodies import Piece

_QUOTE = re.compile(rb'"')
_BACKSLASH = re.compile(rb"\\")


def find_backslash(data: Piece, start: int, stop: int) -> int:
    """Offset of the first backslash in data[start:stop], or -1."""
    if isinstance(data, bytes):
        return data.find(b"\\", start, stop)
    match = _BACKSLASH.search(data, start, stop)
    return -1 if match is None else match.start()


def find_quote(data: Piece, start: int) -> int:
    """Offset of the next '"' at or after `start`, or -1; memchr speed for bytes."""
    if isinstance(data, bytes):
        return data.find(b'"', start)
    match = _QUOTE.search(data, start)
    return -1 if match is None else match.start()

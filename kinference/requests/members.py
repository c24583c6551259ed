"""Top-level member spans of a small, valid JSON object, found at C speed.

The rewrite needs the byte spans of a body's members. Large bodies have them from the scan
during upload; small ones were parsed whole. Re-scanning those with the Python scanner costs
hundreds of microseconds per streamed request, so an ASCII body (the common case: JSON
encoders escape non-ASCII by default) is walked with the json module's C string scanner and
decoder instead, which only re-reads each value once. Any surprise returns None and the
caller falls back to the scanner.
"""

from __future__ import annotations

import json
import re
from json.decoder import scanstring  # type: ignore[attr-defined]  # C, untyped

from kinference.requests.spans import Member

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()  # stateless; decodes one value at a given offset


def ascii_members(raw: bytes) -> tuple[list[tuple[str, Member]], int] | None:
    """(key and spans of every member, offset of the closing brace), or None."""
    if not raw.isascii():
        return None  # character offsets would not be byte offsets
    text = raw.decode("ascii")
    try:
        return _walk(text)
    except (ValueError, IndexError):
        return None


def _walk(text: str) -> tuple[list[tuple[str, Member]], int] | None:
    pos = _skip(text, 0)
    if text[pos] != "{":
        return None
    pos = _skip(text, pos + 1)
    members: list[tuple[str, Member]] = []
    if text[pos] == "}":
        return members, pos
    while text[pos] == '"':
        key, key_end = scanstring(text, pos + 1)
        colon = _skip(text, key_end)
        if text[colon] != ":":
            return None
        _, value_end = _DECODER.raw_decode(text, _skip(text, colon + 1))
        delimiter = _skip(text, value_end)
        members.append((key, Member(pos, key_end, colon + 1, delimiter)))
        if text[delimiter] == "}":
            return members, delimiter
        if text[delimiter] != ",":
            return None
        pos = _skip(text, delimiter + 1)
    return None


def _skip(text: str, pos: int) -> int:
    match = _SPACE.match(text, pos)
    return pos if match is None else match.end()

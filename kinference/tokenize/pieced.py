"""A chat's messages over 1 MiB decoded in short C calls, each holding the GIL ≲ 0.3 ms.

msgspec decodes a JSON text in one C call that holds the GIL throughout: ~2 ms of CPU for a
1 MiB messages array, up to 10 ms on a busy machine, which the event loop then waits for
(docs/benchmarks.md, h141, h169). Here the array is decoded in pieces instead, to the same
value:

- each long string the body scan recorded (`LongString`, over 64 KiB) is replaced by a
  marker, and decoded apart: its JSON text cut every `PIECE_BYTES` where no escape, UTF-8
  sequence or UTF-16 surrogate pair is cut (`_cut`), each piece decoded as a string of its
  own, the pieces joined;
- what is left (the skeleton: roles, short contents) is scanned once for its elements'
  spans (`msgspec.Raw`) and decoded a run of whole elements of at most `PIECE_BYTES` at a
  time; a marker in an element's value is given its string back.

Every byte of the text is decoded by msgspec as part of one piece or another, so the text
is refused where msgspec refuses it whole (invalid UTF-8 or JSON, lone surrogates): the
caller then decodes it as before. A marker met as an object key gives up (None) the same
way. The elements' spans in the text come out too (`Decoded.spans`).
"""

from __future__ import annotations

import re
import secrets
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

PIECE_BYTES = 64 * 1024  # JSON text decoded by one C call (~0.1-0.2 ms), elements whole
_QUOTE, _BACKSLASH, _U = 0x22, 0x5C, 0x75
_LOOK = 64  # bytes looked at past a nominal cut for a clean one (else no cut there)
_HIGH = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}")  # a high surrogate's escape
_COMMA = re.compile(rb"[ \t\n\r]*,[ \t\n\r]*")
_SPACE = re.compile(rb"[ \t\n\r]*")

Span = tuple[int, int]


class GiveUp(Exception):
    """Not decoded in pieces here (a marker as a key, a span that is no string)."""


@dataclass(frozen=True, slots=True)
class Decoded:
    values: list[Any]  # the array's elements
    spans: list[Span]  # where each starts and ends in the text


def decode_array(raw: bytes, strings: Sequence[Span] = ()) -> Decoded | None:
    """The JSON array `raw` decoded in pieces (`strings`: the long strings' spans in it,
    quotes included, in order); None where msgspec refuses it, or it is no array."""
    try:
        return _decode(raw, strings)
    except (msgspec.MsgspecError, RecursionError, GiveUp):
        return None


def _decode(raw: bytes, strings: Sequence[Span]) -> Decoded:
    nonce, texts, parts, cursor = secrets.token_hex(8), {}, [], 0
    marked: list[int] = []  # each marker's offset in the skeleton
    shifts: list[tuple[int, int]] = []  # (a marker's end in the skeleton, what its text adds)
    for index, (start, end) in enumerate(strings):
        if start < cursor or raw[start] != _QUOTE or raw[end - 1] != _QUOTE:
            raise GiveUp
        marker = f"kinference-piece:{nonce}:{index}"  # no client string is one
        texts[marker] = long_string(memoryview(raw)[start + 1 : end - 1])
        parts.append(raw[cursor:start])
        marked.append(sum(map(len, parts)))
        parts.append(f'"{marker}"'.encode())
        shifts.append((marked[-1] + len(parts[-1]), end - start - len(parts[-1])))
        cursor = end
    skeleton = b"".join([*parts, raw[cursor:]]) if parts else raw
    spans = _spans(skeleton, msgspec.json.decode(skeleton, type=list[msgspec.Raw]))
    values: list[Any] = []
    first = 0
    for last in range(len(spans)):
        low, high = spans[first][0], spans[last][1]
        if last + 1 < len(spans) and spans[last + 1][1] - low <= PIECE_BYTES:
            continue
        run = msgspec.json.decode(b"[" + skeleton[low:high] + b"]")
        if not isinstance(run, list) or len(run) != last + 1 - first:
            raise GiveUp
        if bisect_left(marked, high) > bisect_left(marked, low):  # a marker in it
            _restore(run, texts)
        values += run
        first = last + 1
    return Decoded(values, [(_moved(s, shifts), _moved(e, shifts)) for s, e in spans])


def long_string(text: memoryview) -> str:
    """A JSON string's inside (between its quotes), decoded `PIECE_BYTES` at a time."""
    pieces, start = [], 0
    while start < len(text):
        end = _cut(text, start + PIECE_BYTES) if start + PIECE_BYTES < len(text) else len(text)
        decoded = msgspec.json.decode(b'"' + bytes(text[start:end]) + b'"')
        if not isinstance(decoded, str):
            raise GiveUp
        pieces.append(decoded)
        start = end
    return "".join(pieces)


def _cut(text: memoryview, at: int) -> int:
    """The first clean place to cut at or after `at` within `_LOOK` bytes (else the text's
    end: decoded in one more piece): not inside a UTF-8 sequence or an escape, not right
    after a high surrogate's escape (its low one may follow)."""
    for cut in range(at, min(at + _LOOK, len(text))):
        if 0x80 <= text[cut] < 0xC0:
            continue
        for start in range(max(cut - 6, 0), cut):  # an escape is at most 6 bytes
            if text[start] != _BACKSLASH or not _starts_escape(text, start):
                continue
            if start + (6 if text[start + 1] == _U else 2) > cut:
                break  # `cut` is inside it
            if start + 6 == cut and _HIGH.fullmatch(text[start:cut]):
                break
        else:
            return cut
    return len(text)


def _starts_escape(text: memoryview, at: int) -> bool:
    """Whether the backslash at `at` begins an escape (odd run of backslashes up to it);
    a run longer than `_LOOK` counts as one (no cut near it)."""
    run = 0
    while at - run >= 0 and text[at - run] == _BACKSLASH:
        run += 1
        if run > _LOOK:
            return True
    return run % 2 == 1


def _spans(array: bytes, items: list[msgspec.Raw]) -> list[Span]:
    spans, position = [], array.index(b"[") + 1  # after whitespace only: it is valid
    for n, value in enumerate(items):
        found = (_COMMA if n else _SPACE).match(array, position)
        position = found.end() if found is not None else position
        spans.append((position, position + len(value)))
        position += len(value)
    return spans


def _moved(offset: int, shifts: list[tuple[int, int]]) -> int:
    """A skeleton offset as the text's: past each marker, plus what its string was longer."""
    return offset + sum(grown for at, grown in shifts if at <= offset)


def _restore(value: list[Any] | dict[Any, Any], texts: dict[str, str]) -> None:
    """Each marker string in `value` replaced by its long string, in place."""
    for key, item in value.items() if isinstance(value, dict) else enumerate(value):
        if isinstance(key, str) and key in texts:
            raise GiveUp
        if isinstance(item, str):
            if item in texts:
                value[key] = texts[item]
        elif isinstance(item, list | dict):
            _restore(item, texts)

"""What parsing a body costs in memory, estimated before the parse so that it can be charged
to the server's byte budget (`bodies/budget.py`) like the body itself.

A parse holds, at its peak, the Python objects of every field it reads (the last of each
repeated key, `fields.READ_FIELDS`; a huge prompt field as its skeleton, `large.py`) and of
the one other member being validated (each is emptied before the next, `decode.discard`).
What JSON costs as Python objects depends on its density, so the estimate counts values:
each ',', '[', '{' and pair of '"' of a member's text starts at most one value. It reads
the members' bytes (`bytes.count`, a C loop per 1 MiB window), never decodes one.
"""

from __future__ import annotations

from collections.abc import Sequence

from kinference.bodies import Body
from kinference.requests.fields import (
    READ_FIELDS,
    STRICT_PARSE_BYTES,
    MalformedRequest,
    member_keys,
)
from kinference.requests.large import SKELETON_MAX_BYTES, replaced_within, skeleton_bytes
from kinference.requests.spans import LongString, Member

# Bytes of Python objects per counted mark (',' '[' '{' and every other '"': a container
# after a comma counts twice) and per byte of text, over what tracemalloc measured for the
# densest shapes: a validated member peaks at ~75 bytes per value (`[{},{},...]`: 26 MiB
# per MiB of text), a read field at ~150 (51 MiB per MiB: extraction walks it once more),
# a read array of short strings at ~95.
UNREAD_BYTES_PER_VALUE = 48
READ_BYTES_PER_VALUE = 96
BYTES_PER_TEXT_BYTE = 2  # the text decoded from the bytes, and its strings
_WINDOW = 1 << 20  # bytes counted per C call


def parse_cost(body: Body) -> int:
    """Bytes the parse of `body` may hold at its peak, besides the body itself."""
    if body.observer is None and body.size <= STRICT_PARSE_BYTES:
        return _estimate(body, 0, body.size, READ_BYTES_PER_VALUE)  # parsed whole, all kept
    try:
        keyed, scanner = member_keys(body)
    except MalformedRequest:
        return 0  # the parse stops at the same error, before decoding any value
    last: dict[str, Member] = dict(keyed)
    read = sum(
        _read_cost(body, member, scanner.long_strings)
        for key, member in last.items()
        if key in READ_FIELDS
    )
    unread = (
        _estimate(body, member.value_start, member.value_end, UNREAD_BYTES_PER_VALUE)
        for key, member in keyed
        if member.value_end - member.value_start <= STRICT_PARSE_BYTES
        and not (key in READ_FIELDS and last[key] is member)
    )
    return read + max(unread, default=0)


def translation_cost(body: Body) -> int:
    """Bytes translating `body` may hold at its peak besides the body: its parse, every
    value loaded (counted as read), and the translated JSON (text, then its bytes)."""
    loaded = _estimate(body, 0, body.size, READ_BYTES_PER_VALUE)
    return parse_cost(body) + loaded + 2 * body.size


def _read_cost(body: Body, member: Member, long_strings: Sequence[LongString]) -> int:
    start, end = member.value_start, member.value_end
    if end - start <= STRICT_PARSE_BYTES:
        return _estimate(body, start, end, READ_BYTES_PER_VALUE)
    kept = skeleton_bytes(long_strings, start, end)
    if kept > SKELETON_MAX_BYTES:
        return 0  # reported unextractable, never parsed
    # The skeleton's text: the span without its replaced strings, each one marker value. Its
    # marks are counted; the replaced strings are never read (the parse worker has not
    # even been sent their insides).
    replaced = replaced_within(long_strings, start, end)
    values = len(replaced)
    for gap_start, gap_end in zip(
        [start, *(string.end for string in replaced)],
        [*(string.start for string in replaced), end],
        strict=True,
    ):
        values += _marks(body, gap_start, gap_end)
    return READ_BYTES_PER_VALUE * values + BYTES_PER_TEXT_BYTE * kept


def _estimate(body: Body, start: int, end: int, per_value: int) -> int:
    return per_value * (1 + _marks(body, start, end)) + BYTES_PER_TEXT_BYTE * (end - start)


def _marks(body: Body, start: int, end: int) -> int:
    """',' '[' '{' and pairs of '"' in the body's bytes [start, end)."""
    values, cursor = 0, start
    while cursor < end:
        window = body.read_span(cursor, min(cursor + _WINDOW, end))
        values += window.count(b",") + window.count(b"[") + window.count(b"{")
        values += window.count(b'"') // 2
        cursor += len(window)
    return values

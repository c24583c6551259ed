"""What of a body crosses to the parse worker, and what of the parse comes back.

To the worker: the body's bytes, except the inside of the long strings the parse never
reads. A long string (`scan.LongString`) inside a member over `STRICT_PARSE_BYTES` is either
replaced by a marker in the skeleton (`large.py`) or in a member nothing decodes; of it the
parse reads only the two `digest.WINDOW_BYTES` windows at its ends, so the bytes between
them stay behind (a 64 MiB body holding one base64 image ships ~10 KiB). The worker rebuilds
a body of the same size whose gaps read as zero bytes from an anonymous mapping, which
costs no memory: offsets, spans and digests are those of the picker's body.

Back from the worker: the `InferenceRequest`, with every value kept as parsed only up to
`RETURNED_VALUE_BYTES` of JSON text in all; larger ones come back as `LargeValue` spans
(what reads them later, the tokenizer and the translation, parses spans already). The
picker unpickles the result on the event loop, so it must stay small whatever the body: a
MiB of `[{},...]` unpickles in ~25 ms. The fields the loop reads as values after the parse
(`VALUE_FIELDS`) are always returned; a body where one of them is larger than the bound is
malformed.
"""

from __future__ import annotations

import mmap
from dataclasses import replace
from typing import Any

from kinference.bodies import Body, Piece
from kinference.requests.digest import WINDOW_BYTES
from kinference.requests.fields import STRICT_PARSE_BYTES, LargeValue
from kinference.requests.large import is_replaced, strings_within
from kinference.requests.parse import HINT_FIELD, MAX_TOKENS_FIELDS, InferenceRequest
from kinference.requests.scan import JsonScanner

Span = tuple[int, int]

RETURNED_VALUE_BYTES = 64 * 1024  # JSON text of the values returned parsed, in all
VALUE_FIELDS = frozenset({"model", "stream", "stream_options", HINT_FIELD, *MAX_TOKENS_FIELDS})


def shipped_spans(body: Body) -> list[Span]:
    """The byte ranges of `body` the worker needs, in order."""
    scanner = body.observer
    if not isinstance(scanner, JsonScanner) or scanner.finish_reason() is not None:
        return [(0, body.size)] if body.size else []
    spans: list[Span] = []
    cursor = 0
    for start, end in _holes(scanner):
        spans.append((cursor, start))
        cursor = end
    spans.append((cursor, body.size))
    return [(start, end) for start, end in spans if end > start]


def _holes(scanner: JsonScanner) -> list[Span]:
    holes = []
    for member in scanner.members:
        if member.value_end - member.value_start <= STRICT_PARSE_BYTES:
            continue  # decoded whole: every byte of it is read
        for string in strings_within(scanner.long_strings, member.value_start, member.value_end):
            start, end = string.start + 1 + WINDOW_BYTES, string.end - 1 - WINDOW_BYTES
            if is_replaced(string) and end > start:
                holes.append((start, end))
    return holes


def payload(body: Body, spans: list[Span]) -> list[Piece]:
    """The bytes of `spans` as views of the body's pieces (nothing copied)."""
    return [piece for start, end in spans for piece in body.views(start, end)]


def rebuilt(size: int, spans: list[Span], data: bytes) -> list[Piece]:
    """In the worker: pieces of a body of `size` bytes holding `data` at `spans`, zeros
    elsewhere (never read)."""
    view = memoryview(data)
    pieces: list[Piece] = []
    cursor = used = 0
    for start, end in [*spans, (size, size)]:
        if start > cursor:
            pieces.append(memoryview(mmap.mmap(-1, start - cursor, prot=mmap.PROT_READ)))
        pieces.append(view[used : used + end - start])
        used += end - start
        cursor = end
    return [piece for piece in pieces if len(piece)]


def returned(request: InferenceRequest) -> InferenceRequest | str:
    """In the worker: `request` with its large values as spans, or why it is malformed."""
    fields = request.fields
    if fields.open_at < 0:
        return request  # parsed whole: small (the worker scans every body it parses)
    values: dict[str, Any] = dict(fields.values)
    kept = 0
    for key, value in fields.values.items():
        member = fields.spans[key]
        width = member.value_end - member.value_start
        if isinstance(value, LargeValue):
            continue
        if key in VALUE_FIELDS:
            if width > RETURNED_VALUE_BYTES:
                return f'"{key}" is larger than the {RETURNED_VALUE_BYTES} bytes accepted'
        elif kept + width <= RETURNED_VALUE_BYTES:
            kept += width
        else:
            values[key] = LargeValue(member.value_start, member.value_end, _first_byte(value))
    return replace(request, fields=replace(fields, values=values))


def _first_byte(value: object) -> str:
    if isinstance(value, dict):
        return "{"
    if isinstance(value, list):
        return "["
    return '"' if isinstance(value, str) else "0"

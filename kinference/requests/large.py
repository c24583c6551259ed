"""The value of a huge field, loaded without reading the long strings inside it.

A field over `STRICT_PARSE_BYTES` (a `LargeValue`: `messages` holding a 60 MiB base64 image,
a book-length `prompt`) is not parsed at Pick. To extract its prompt text anyway, we build a
*skeleton* of its JSON text: the span's bytes with every long string the scanner recorded
(`JsonScanner.long_strings`) replaced by a short marker string, and parse that. The skeleton
of a 64 MiB message with one image is a few hundred bytes; the image costs a bisect and the
blake2b of its two 4 KiB end windows (`digest.span_digest`). No Python loop per byte, no copy
of the long strings, and the parse of what is left runs in C.

Which strings become markers:

- a long string without escapes: its raw bytes are its UTF-8 text, so its digest is the same
  as `digest.text_digest` of the decoded string on the small-body path;
- a long string with escapes of at most `STRICT_PARSE_BYTES` stays in the skeleton: json
  decodes it and the prompt builder applies the small-body rule to the result, exactly;
- a longer one with escapes can never be met on the small-body path (no value that large is
  parsed whole), so it is digested over its raw bytes rather than decoded.

What is left besides markers may itself be large (a long conversation of short strings). It
is parsed in full up to `SKELETON_MAX_BYTES` (~20 ms for 4 MiB of chat JSON); beyond that the
field is reported unextractable, which makes the prompt incomplete (routing: DEGRADED).
"""

from __future__ import annotations

import json
import secrets
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kinference.bodies import Body
from kinference.requests.decode import loads
from kinference.requests.digest import Digest, span_digest
from kinference.requests.fields import STRICT_PARSE_BYTES, LargeValue
from kinference.requests.spans import LongString

SKELETON_MAX_BYTES = 4 << 20  # JSON text parsed at Pick for one huge field, markers aside


class Unextractable(Exception):
    """A huge field whose prompt text cannot be extracted cheaply; the message says why."""


@dataclass(frozen=True, slots=True)
class Skeleton:
    """The parsed skeleton and the long string each marker stands for."""

    value: Any
    markers: dict[str, Digest]


def load_large(
    body: Body, large: LargeValue, long_strings: Sequence[LongString], name: str
) -> Skeleton:
    """Parse the skeleton of field `name`; raises Unextractable."""
    replaced = replaced_within(long_strings, large.start, large.end)
    kept = (large.end - large.start) - sum(s.end - s.start for s in replaced)
    if kept > SKELETON_MAX_BYTES:
        raise Unextractable(
            f'"{name}" holds {kept} bytes of JSON besides its long strings, more than the '
            f"{SKELETON_MAX_BYTES} parsed at Pick"
        )
    nonce = secrets.token_hex(8)  # markers no client string can collide with
    markers: dict[str, Digest] = {}
    parts: list[bytes] = []
    cursor = large.start
    for index, string in enumerate(replaced):
        marker = f"\x00kinference:{nonce}:{index}"
        markers[marker] = span_digest(body, string.start + 1, string.end - 1)
        parts.append(body.read_span(cursor, string.start))
        parts.append(json.dumps(marker).encode())
        cursor = string.end
    parts.append(body.read_span(cursor, large.end))
    return Skeleton(_parse(b"".join(parts), name), markers)


def skeleton_bytes(long_strings: Sequence[LongString], start: int, end: int) -> int:
    """Bytes of JSON the skeleton of the value at [start, end) parses, markers aside."""
    replaced = replaced_within(long_strings, start, end)
    return (end - start) - sum(string.end - string.start for string in replaced)


def replaced_within(strings: Sequence[LongString], start: int, end: int) -> list[LongString]:
    """The long strings inside [start, end) that the skeleton replaces by markers."""
    return [string for string in strings_within(strings, start, end) if is_replaced(string)]


def strings_within(strings: Sequence[LongString], start: int, end: int) -> Sequence[LongString]:
    """The recorded strings inside [start, end); they are recorded in body order."""
    lo = bisect_left(strings, start, key=lambda string: string.start)
    hi = bisect_left(strings, end, key=lambda string: string.start)
    return strings[lo:hi]


def is_replaced(string: LongString) -> bool:
    return not string.escaped or string.end - string.start - 2 > STRICT_PARSE_BYTES


def _parse(skeleton: bytes, name: str) -> Any:
    try:
        return loads(skeleton.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise Unextractable(f'"{name}" is not UTF-8 near byte {exc.start} of it') from None
    except (ValueError, RecursionError) as exc:
        raise Unextractable(f'"{name}" is not valid JSON: {_reason(exc)}') from None


def _reason(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "nesting too deep"
    if isinstance(exc, json.JSONDecodeError):
        return exc.msg  # its position is in the skeleton, not in the body: leave it out
    return str(exc).split(":")[0]

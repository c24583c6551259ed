"""Top-level fields of a scanned JSON body, parsed strictly when they are small."""

from __future__ import annotations

from dataclasses import dataclass
from json import JSONDecodeError
from typing import Any

from kinference.bodies import Body
from kinference.native import load_limit_counts
from kinference.records import record
from kinference.requests.decode import Refused, discard, loads, strict_loads
from kinference.requests.scan import JsonScanner
from kinference.requests.spans import MAX_DEPTH, MAX_MEMBERS, LongString, Member

# Values up to this size are parsed (and so validated) in full at Pick time; larger ones -
# base64 images, book-length prompts - keep only their span and the scanner's structural
# check, so a Pick on a 100 MiB body costs milliseconds.
STRICT_PARSE_BYTES = 1 << 20
# Top-level fields anything reads the value of (routing, prompt extraction, rewriting). Of a
# scanned body, every other field is parsed to validate it and then kept only as its span
# when larger than KEEP_UNREAD_BYTES: a body of many dense members must not hold their
# parsed objects (tens of times the bytes) until the request ends.
READ_FIELDS = frozenset(
    {
        *("model", "stream", "stream_options", "kinference", "tool_choice", "tools"),
        *("max_completion_tokens", "max_output_tokens", "max_tokens", "functions"),
        *("system", "instructions", "prompt", "messages", "input"),
        *("previous_response_id", "conversation"),
    }
)
KEEP_UNREAD_BYTES = 4096
# Every byte but the three the scanner-limit pre-count reads (`_may_break_scan_limits`).
_NOT_COUNTED = bytes(sorted(set(range(256)) - set(b"{[:")))


class MalformedRequest(ValueError):
    """The body is not an inference request; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class LargeValue:
    """A value left unparsed because of its size; `first_byte` tells its JSON type."""

    start: int
    end: int
    first_byte: str


@record
class Fields:
    """The body's top-level fields (last one wins for a repeated key).

    `spans` (the member each key's value came from), `members` (every member in order,
    repeats included), `open_at`, `close_at` and `long_strings` locate things in the body
    when it was scanned (large bodies); they are empty and -1 for a body parsed whole.
    """

    values: dict[str, Any]
    spans: dict[str, Member]
    open_at: int
    close_at: int
    members: tuple[tuple[str, Member], ...] = ()
    long_strings: tuple[LongString, ...] = ()


def scan_body(body: Body) -> JsonScanner:
    """The scanner that watched the upload, or a fresh scan when none did."""
    if isinstance(body.observer, JsonScanner):
        return body.observer
    scanner = JsonScanner()
    for piece in body.pieces:
        scanner.feed(piece)
    return scanner


def read_fields(body: Body) -> Fields:
    """Parse the top-level members of a JSON-object body; raises MalformedRequest.

    A body the upload did not scan (small ones) is parsed whole, which is strict and, in C,
    faster than scanning; a scanned one is read span by span.
    """
    if body.observer is None and body.size <= STRICT_PARSE_BYTES:
        return _parse_whole(body)
    return _read_spans(body)


def _parse_whole(body: Body) -> Fields:
    first = body.pieces[0] if body.pieces else b""
    raw = first if len(body.pieces) == 1 and isinstance(first, bytes) else b"".join(body.pieces)
    if _may_break_scan_limits(raw):  # rare: let the scanner rule, so both paths agree
        reason = scan_body(body).finish_reason()
        if reason is not None:
            raise MalformedRequest(reason)
    try:
        values = _loads(raw)
    except JSONDecodeError as exc:
        raise MalformedRequest(f"invalid JSON at byte {exc.pos}: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:
        raise MalformedRequest(f"invalid JSON: {_reason(exc)}") from None
    if not isinstance(values, dict):
        raise MalformedRequest("the body is not a JSON object")
    return Fields(values, {}, -1, -1)


def _read_spans(body: Body) -> Fields:
    scanner = scan_body(body)
    reason = scanner.finish_reason()
    if reason is not None:
        raise MalformedRequest(reason)
    values: dict[str, Any] = {}
    spans: dict[str, Member] = {}
    members = []
    for member in scanner.members:
        key = _decode_key(body, member)
        values[key] = _decode_value(body, key, member)
        spans[key] = member
        members.append((key, member))
    return Fields(
        values,
        spans,
        scanner.open_at,
        scanner.close_at,
        tuple(members),
        tuple(scanner.long_strings),
    )


def member_keys(body: Body) -> tuple[list[tuple[str, Member]], JsonScanner]:
    """Every top-level member of a valid body with its decoded key, scanning it if needed."""
    scanner = scan_body(body)
    reason = scanner.finish_reason()
    if reason is not None:
        raise MalformedRequest(reason)
    return [(_decode_key(body, member), member) for member in scanner.members], scanner


def _may_break_scan_limits(raw: bytes) -> bool:
    """Cheap over-estimate of whether the scanner's depth or field-count limit could trip:
    more `{` and `[` than MAX_DEPTH, or more `:` than MAX_MEMBERS (strings included).
    Counted by `_scan.limit_counts` where it was built (memchr from one to the next: 0.2
    µs over a 4 KiB chat body, where the pure form took 3.6), else `pure_limit_counts`."""
    counts = load_limit_counts()
    brackets, colons = pure_limit_counts(raw) if counts is None else counts(raw)
    return brackets > MAX_DEPTH or colons > MAX_MEMBERS


def pure_limit_counts(raw: bytes) -> tuple[int, int]:
    """The bytes `{` and `[`, and the bytes `:`, in `raw`: counted in what one `translate`
    pass keeps of them (~3x faster than three `count` passes over a chat body, whose few
    hundred such bytes are then counted at once). The reference of `_scan.limit_counts`."""
    kept = raw.translate(None, _NOT_COUNTED)
    return kept.count(b"{") + kept.count(b"["), kept.count(b":")


def _loads(raw: bytes) -> Any:
    """`json.loads` of the UTF-8 text `raw` (raising what it raises, or MalformedRequest for
    bytes that are not UTF-8), by msgspec's faster decoder wherever it gives the same."""
    try:
        return strict_loads(raw)
    except Refused:
        return loads(_utf8(raw))


def _utf8(raw: bytes) -> str:
    """JSON bodies are UTF-8 (RFC 8259); json.loads would otherwise guess UTF-16 or -32."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedRequest(f"body is not UTF-8 at byte {exc.start}") from None


def _decode_key(body: Body, member: Member) -> str:
    try:
        key = _loads(body.read_span(member.key_start, member.key_end))
    except (ValueError, RecursionError) as exc:
        raise MalformedRequest(f"invalid JSON key at byte {member.key_start}: {exc}") from None
    if not isinstance(key, str):  # the scanner only records quoted keys; stay defensive
        raise MalformedRequest(f"invalid JSON key at byte {member.key_start}")
    return key


def _decode_value(body: Body, key: str, member: Member) -> Any:
    if member.value_end - member.value_start > STRICT_PARSE_BYTES:
        return LargeValue(member.value_start, member.value_end, _first_byte(body, member))
    raw = body.read_span(member.value_start, member.value_end)
    try:
        value = _loads(raw)
    except (ValueError, RecursionError) as exc:
        raise MalformedRequest(f"field {key!r} is not valid JSON: {_reason(exc)}") from None
    if key in READ_FIELDS or len(raw) <= KEEP_UNREAD_BYTES:
        return value
    discard(value)
    return LargeValue(member.value_start, member.value_end, chr(raw.lstrip(b" \t\r\n")[0]))


def _first_byte(body: Body, member: Member) -> str:
    """The value's first non-whitespace character, however much whitespace leads it."""
    window = 4096  # bytes read at a time
    for start in range(member.value_start, member.value_end, window):
        head = body.read_span(start, min(start + window, member.value_end)).lstrip(b" \t\r\n")
        if head:
            return chr(head[0])
    return ""


def _reason(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "nesting too deep"
    if isinstance(exc, JSONDecodeError):
        return exc.msg
    return str(exc).split(":")[0]

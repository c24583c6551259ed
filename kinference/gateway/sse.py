"""Server-sent events split out of a byte stream as it arrives, each parsed at most once.

An event ends at a blank line (`\\n\\n`, `\\r\\n\\r\\n` or `\\r\\r`, any of them split
across reads). `SseEvent.raw` is the event exactly as received, blank line included, so a
relay that keeps an event forwards its bytes untouched; `data` is its `data:` lines joined
(the spec's rules: one optional space after the colon, lines joined by `\\n`), `name` its
`event:` field, and `json()` the payload parsed on first use (None when it is not a JSON
object, e.g. `[DONE]`).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

MAX_EVENT_BYTES = 4 * 1024 * 1024  # an event longer than this stops the splitting
_NO_JSON: Any = object()


class SseEvent:
    """One event: its raw bytes, `event:` name and joined `data:` payload."""

    __slots__ = ("_json", "data", "name", "raw")

    def __init__(self, raw: bytes, name: str, data: bytes | None) -> None:
        self.raw = raw
        self.name = name
        self.data = data  # None: the event has no data line (a comment, a keep-alive)
        self._json: Any = _NO_JSON

    def json(self) -> dict[str, Any] | None:
        """The payload as a JSON object, or None (not JSON, not an object, no data)."""
        if self._json is _NO_JSON:
            self._json = json_object(self.data) if self.data else None
        return self._json  # type: ignore[no-any-return]

    @property
    def done(self) -> bool:
        return self.data == b"[DONE]"


def encode_event(data: bytes, name: str = "") -> bytes:
    """The wire form of an event with one `data:` line per payload line."""
    lines = [f"event: {name}".encode()] if name else []
    lines.extend(b"data: " + line for line in data.split(b"\n"))
    return b"\n".join(lines) + b"\n\n"


class SseSplitter:
    """Feed it every byte in order; it hands back each completed event once.

    An unfinished event's pieces are kept apart and looked at again only when a read could
    end it (a line end right after a line end, in the read or across its seam): joined and
    split once per event, not once per read. Before, each read joined and split the whole
    event so far: a 2 MiB event in 4 KiB reads took 1.4 s of the event loop (9.4 s with
    CRLF line ends, split line by line).
    """

    def __init__(self) -> None:
        self._pending: list[bytes] = []  # the unfinished event's pieces
        self._size = 0  # their bytes
        self._tail = b""  # their last 3 bytes
        self.broken = False  # an event grew past MAX_EVENT_BYTES: the rest is not split
        self.spilled = b""  # the unsplit bytes held when it broke (a relay sends them as is)
        # The bytes the last `feed` completed, exactly as received: those of its events and
        # whatever lay between them (once broken, the chunk itself). A relay that forwards
        # only these never sends part of an event, so it can always append one of its own.
        self.passed = b""

    def feed(self, chunk: bytes) -> list[SseEvent]:
        if self.broken or not chunk:
            self.passed = chunk
            return []
        pending = self._pending
        if pending and not _may_end(self._tail, chunk):
            self.passed = b""
            pending.append(chunk)
            self._size += len(chunk)
            self._tail = chunk[-3:] if len(chunk) >= 3 else (self._tail + chunk)[-3:]
            if self._size > MAX_EVENT_BYTES:
                self.broken, self.spilled = True, b"".join(pending)
                self._reset(b"")
            return []
        data = b"".join((*pending, chunk)) if pending else chunk
        if b"\r" in data:
            events, rest = _split_any(data)
        else:
            events, rest = _split_lf(data)
        self.passed = data[: len(data) - len(rest)] if rest else data
        if len(rest) > MAX_EVENT_BYTES:
            self.broken, self.spilled, rest = True, rest, b""
        self._reset(rest)
        return events

    def single(self, chunk: bytes) -> bytes | None:
        """When `chunk` is, with nothing pending, exactly one event of one `data:` line and
        LF line ends (a token stream's usual read), its payload, and the chunk passed, as
        `feed` would make it; else None, nothing changed (then `feed` it)."""
        if self._pending or self.broken or chunk[:6] != b"data: ":
            return None
        if chunk.find(b"\n") != len(chunk) - 2 or chunk[-1:] != b"\n" or b"\r" in chunk:
            return None
        self.passed = chunk
        return chunk[6:-2]

    def _reset(self, rest: bytes) -> None:
        self._pending = [rest] if rest else []
        self._size = len(rest)
        self._tail = rest[-3:]

    def forward(self, last: bool) -> bytes:
        """What a relay without a transform sends after a `feed`: the bytes it completed,
        those spilled if it broke there, and with `last` (the stream's last read) the rest
        of an event that never ended (then taken: each byte goes once)."""
        out = self.passed
        if self.spilled:
            out, self.spilled = out + self.spilled, b""
        if last and self._pending:
            out += self.take_rest()
        return out

    def take_rest(self) -> bytes:
        """The bytes after the last complete event, no longer held."""
        rest = self.leftover
        self._reset(b"")
        return rest

    @property
    def leftover(self) -> bytes:
        """Bytes after the last complete event (a stream that ended without a blank line)."""
        return b"".join(self._pending)


# Two line ends in a row (a blank line) hold one of these; a lone CRLF holds none.
_BLANK = (b"\n\n", b"\r\r", b"\n\r")


def _may_end(tail: bytes, chunk: bytes) -> bool:
    """Whether `chunk`, after bytes ending with `tail`, may complete an event."""
    seam = tail + chunk[:3]
    return any(blank in chunk or blank in seam for blank in _BLANK)


def _split_lf(data: bytes) -> tuple[list[SseEvent], bytes]:
    parts = data.split(b"\n\n")
    rest = parts.pop()
    events = []
    for part in parts:
        if not part:
            continue
        if part[:6] == b"data: " and b"\n" not in part:  # the common case: one data line
            events.append(SseEvent(part + b"\n\n", "", part[6:]))
        else:
            events.append(_event(part + b"\n\n", part.split(b"\n")))
    return events, rest


def _split_any(data: bytes) -> tuple[list[SseEvent], bytes]:
    """Line by line, for streams using CR or CRLF line ends."""
    events: list[SseEvent] = []
    lines: list[bytes] = []
    start = pos = 0
    size = len(data)
    while pos < size:
        end = _line_end(data, pos)
        if end < 0:
            break
        line = data[pos:end]
        pos = end + (2 if data.startswith(b"\r\n", end) else 1)
        if end == size - 1 and data[end] == 13:  # a CR last: its LF may be in the next read
            pos = end
            break
        if line:
            lines.append(line)
        elif lines:
            events.append(_event(data[start:pos], lines))
            lines, start = [], pos
        else:
            start = pos
    return events, data[start:]


def _line_end(data: bytes, pos: int) -> int:
    cr, lf = data.find(b"\r", pos), data.find(b"\n", pos)
    if cr < 0 or (0 <= lf < cr):
        return lf
    return cr


def _event(raw: bytes, lines: list[bytes]) -> SseEvent:
    if len(lines) == 1 and lines[0].startswith(b"data: "):  # the common case
        return SseEvent(raw, "", lines[0][6:])
    name, data = "", []
    for line in lines:
        field, _, value = line.partition(b":")
        value = value.removeprefix(b" ")
        if field == b"data":
            data.append(value)
        elif field == b"event":
            name = value.decode("utf-8", "replace")
    return SseEvent(raw, name, b"\n".join(data) if data else None)


def json_object(payload: bytes) -> dict[str, Any] | None:
    """`payload` parsed when it is a JSON object, else None (not JSON, or another value).

    orjson parses the usual payload several times faster than the json module (this runs
    for every event of every stream, on the event loop); what it refuses and the json
    module accepts (NaN and Infinity, lone surrogate escapes) is parsed by the json module,
    so such a payload is read as before. Integers past 64 bits are read as floats."""
    if payload[:1] != b"{" and payload.lstrip()[:1] != b"{":
        return None  # not an object ([DONE], a number ...): no parse, no exception
    try:
        document = orjson.loads(payload)
    except orjson.JSONDecodeError:
        try:
            document = json.loads(payload)
        except ValueError:
            return None
    return document if isinstance(document, dict) else None

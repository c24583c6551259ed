"""Server-sent events split out of a byte stream, for the translator (LF or CRLF lines)."""

from __future__ import annotations

import json
from typing import Any

MAX_EVENT_BYTES = 4 * 1024 * 1024  # an event longer than this stops the splitting


class SplitEvent:
    """One event: its `event:` name and its joined `data:` payload."""

    __slots__ = ("data", "name")

    def __init__(self, name: str, data: bytes | None) -> None:
        self.name = name
        self.data = data

    def json(self) -> dict[str, Any] | None:
        if not self.data:
            return None
        try:
            document = json.loads(self.data)
        except ValueError:
            return None
        return document if isinstance(document, dict) else None

    @property
    def done(self) -> bool:
        return self.data == b"[DONE]"


class Splitter:
    """Feed it every byte in order; it hands back each completed event once."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[SplitEvent]:
        data = (self._pending + chunk).replace(b"\r\n", b"\n")
        *parts, rest = data.split(b"\n\n")
        self._pending = rest if len(rest) <= MAX_EVENT_BYTES else b""
        return [_event(part) for part in parts if part.strip()]


def _event(part: bytes) -> SplitEvent:
    name, data = "", []
    for line in part.split(b"\n"):
        field, _, value = line.partition(b":")
        value = value.removeprefix(b" ")
        if field == b"data":
            data.append(value)
        elif field == b"event":
            name = value.decode("utf-8", "replace")
    return SplitEvent(name, b"\n".join(data) if data else None)

"""The server-sent events a translator reads and writes.

A translator reads any object with the `Event` attributes (the relay's parsed events) and
writes events with `encode`.
"""

from __future__ import annotations

import json
from typing import Any, Protocol


class Event(Protocol):
    """One server-sent event as received: its `event:` name and its JSON payload."""

    name: str

    def json(self) -> dict[str, Any] | None: ...

    @property
    def done(self) -> bool: ...  # the payload is OpenAI's `[DONE]`


def encode(payload: dict[str, Any], name: str = "") -> bytes:
    """The wire form of one event: `event: NAME` when named, one compact `data:` line."""
    data = b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
    return f"event: {name}\n".encode() + data if name else data


DONE = b"data: [DONE]\n\n"

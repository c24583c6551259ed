"""What the body scan (`kinference.requests.scan`) finds and the limits it holds bodies to:
the byte spans of the top-level members and of the long strings, absolute in the body."""

from __future__ import annotations

from dataclasses import dataclass

MAX_DEPTH = 128  # deeper nesting is refused: no inference request needs it
MAX_MEMBERS = 1024  # top-level fields; real requests carry a few dozen
LONG_STRING_BYTES = 64 * 1024  # content bytes between the quotes; longer strings are recorded


@dataclass(slots=True)
class Member:
    """Absolute byte spans of one top-level `"key": value` pair (end offsets exclusive)."""

    key_start: int
    key_end: int
    value_start: int = -1  # just after the colon; the value may start with whitespace
    value_end: int = -1  # the ',' or '}' that ends the member


@dataclass(frozen=True, slots=True)
class LongString:
    """A string of more than LONG_STRING_BYTES, anywhere in the body (offsets absolute)."""

    start: int  # the opening quote
    end: int  # just after the closing quote
    escaped: bool  # holds a backslash: its raw bytes are not its text

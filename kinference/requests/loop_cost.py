"""How long the parse of a body would hold the event loop, estimated from its upload's scan.

A body over `offload.INLINE_PARSE_BYTES` is parsed on the loop when this estimate is under
`LOOP_PARSE_S`, else in the parse worker. What a parse costs is not its size: a 64 KiB chat
body is a few long strings and parses in ~0.1 ms, where 64 KiB of `[[[[1]]]],...` take
~18 ms (the C decoder makes a Python object per value; extraction walks messages and
tools in Python). The scanner that watched the upload (`scan.JsonScanner`) counts, for an
addition per event, the strings, their bytes and the brackets; the rest of the body
(numbers, literals, separators, whitespace) is at most one value per two bytes. So:

    seconds = SECONDS_PER_STRING_BYTE * bytes of strings decoded
            + SECONDS_PER_VALUE * (strings + brackets + other bytes / 2)

Both rates are above the worst measured on this project's 2-core machine (uvloop, Python
3.11): strings of escaped quotes decode at ~4.7 ns a byte (plain prose ~1.6), nested
arrays cost ~0.65 us per value, `tools` of empty objects ~0.47 us, messages of one word
~0.9 us per message (five values). The estimate was 1.1-20 times the parse's time for
every shape measured but in one disturbed run (docs/benchmarks.md, precise mode's sixth
round; the unit tests check the counts and the decisions, not times), so a body parsed on
the loop holds it under ~`LOOP_PARSE_S` whatever it holds; an ordinary chat body of up to
~750 KiB goes there, one of more than ~4,000 values does not.

Long strings the parse never decodes (those a huge member's skeleton replaces by markers,
`large.py`) are not counted as decoded bytes. A body whose scan failed or did not finish is
refused by the parse before any value is decoded: it costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from kinference.bodies import Body
from kinference.requests.fields import STRICT_PARSE_BYTES
from kinference.requests.large import replaced_within
from kinference.requests.scan import JsonScanner

SECONDS_PER_STRING_BYTE = 5e-9
SECONDS_PER_VALUE = 1e-6
# A parse estimated under this runs on the loop: ~4 ms at most (the densest 32 KiB body,
# parsed on the loop whatever it holds, costs ~9 ms).
LOOP_PARSE_S = 0.004
# Bytes of Python objects an inline parse may hold per value and per byte of the body
# (`cost.py`'s rates for the fields a parse reads), charged to the body budget while the
# parsed request is held.
BYTES_PER_VALUE = 96
BYTES_PER_BODY_BYTE = 2


@dataclass(frozen=True, slots=True)
class ParseCost:
    """A body's parse, as the upload's scan saw it: its time on the loop and its memory."""

    seconds: float
    values: int  # JSON values, at most
    memory_bytes: int

    @property
    def on_loop(self) -> bool:
        return self.seconds <= LOOP_PARSE_S


def parse_cost(body: Body) -> ParseCost | None:
    """The parse cost of a scanned body; None when no scan watched it (then nothing is
    known of its density)."""
    scanner = body.observer
    if not isinstance(scanner, JsonScanner):
        return None
    if not scanner.complete:
        return ParseCost(0.0, 0, 0)  # refused before any value is decoded
    skipped = _skipped_bytes(scanner)
    decoded = scanner.string_bytes - skipped
    other = body.size - scanner.string_bytes
    values = scanner.strings + scanner.brackets + other // 2
    seconds = SECONDS_PER_STRING_BYTE * decoded + SECONDS_PER_VALUE * values
    memory = BYTES_PER_VALUE * values + BYTES_PER_BODY_BYTE * (body.size - skipped)
    return ParseCost(seconds, values, memory)


def _skipped_bytes(scanner: JsonScanner) -> int:
    """Bytes of the long strings a huge member's skeleton replaces by markers."""
    skipped = 0
    for member in scanner.members:
        if member.value_end - member.value_start > STRICT_PARSE_BYTES:
            replaced = replaced_within(scanner.long_strings, member.value_start, member.value_end)
            skipped += sum(string.end - string.start for string in replaced)
    return skipped

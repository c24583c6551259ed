"""Events on the shared stream: one stream entry per flush, carrying a batch of events.

Entry fields: `i` the instance id, `s` its flush sequence number (1, 2, 3…; a jump tells a
reader it missed entries of that instance), `e` the events as JSON, and on a snapshot flush
`l`, the instance's whole load (endpoint -> requests in flight) as JSON. Prefix block hashes
travel as base64 of little-endian uint64s: a quarter of their decimal size.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

PICKED = "p"  # [endpoint, model, hashes]: a request went to endpoint
RELEASED = "r"  # [endpoint]: a request on endpoint finished, aborted or expired
FIRST_TOKEN = "t"  # [endpoint, model, ttft_ms]
ITL = "l"  # [endpoint, model, [15 layout-1 bucket counts]]
ENGINE = "g"  # [endpoint, reading dict]: a scrape leader's engine reading
COOLED = "b"  # [provider]: a provider was just blacklisted; re-read its key

Event = list[Any]


def pack_hashes(hashes: Sequence[int]) -> str:
    return base64.b64encode(np.asarray(hashes, dtype="<u8").tobytes()).decode("ascii")


def unpack_hashes(text: str) -> tuple[int, ...]:
    return tuple(int(value) for value in np.frombuffer(base64.b64decode(text), dtype="<u8"))


@dataclass(frozen=True, slots=True)
class Entry:
    """One decoded stream entry."""

    id: str
    instance: str
    seq: int
    events: list[Event]
    load: dict[str, int] | None = None  # the instance's whole load, on a snapshot flush


def encode(
    instance: str, seq: int, events: list[Event], load: dict[str, int] | None = None
) -> dict[str, str | int]:
    fields: dict[str, str | int] = {
        "i": instance,
        "s": seq,
        "e": json.dumps(events, separators=(",", ":")),
    }
    if load is not None:
        fields["l"] = json.dumps(load, separators=(",", ":"))
    return fields


def decode(entry_id: bytes | str, fields: dict[bytes, bytes]) -> Entry | None:
    """The entry, or None when it is not one of ours (a foreign writer, a newer format)."""
    try:
        events = json.loads(fields[b"e"])
        instance, seq = fields[b"i"].decode(), int(fields[b"s"])
        load = json.loads(fields[b"l"]) if b"l" in fields else None
    except (KeyError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(events, list) or not isinstance(load, dict | None):
        return None
    ident = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return Entry(ident, instance, seq, events, load)


def entry_ms(entry_id: str) -> int:
    """Milliseconds since the epoch at which Redis appended the entry (from its id)."""
    return int(entry_id.split("-", 1)[0])

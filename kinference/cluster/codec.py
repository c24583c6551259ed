"""Events on the shared stream: one stream entry per flush, carrying a batch of events.

Entry fields: `i` the instance id, `s` its flush sequence number (1, 2, 3…; a jump tells a
reader it missed entries of that instance), `e` the events as JSON, and on a snapshot flush
`l`, the instance's whole load (endpoint -> requests in flight) as JSON. Prefix block hashes
travel as little-endian uint64s: in a pool shard's stream (read only by this release) as
one binary field `h`, every pick's blocks one after the other, its event giving their count;
in the global stream (read by earlier releases too) as base64 inside the pick event. Hashes
are most of an entry's bytes (docs/scaling.md), and base64 adds a third.
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
# [endpoint, model, uncached tokens, prefill ms | null, service ms | null]: the TTFT
# model's samples of one finished request (null: not measured)
SERVED = "s"
# [endpoint, pick id, start block, uncached tokens, tokens per block]: the instance's pick
# just before it on that endpoint prefills its blocks from `start` on, until PREFILLED
PREFILLING = "f"
PREFILLED = "d"  # [endpoint, pick id]: that prefill is over
# [endpoint, base64 hashes, kept blocks, age | null]: the engine had only `kept` leading
# blocks of a prompt cached although the index said more (an eviction learned)
SHORTFALL = "x"
CONFIRMED = "k"  # [endpoint, age | null]: the engine had the predicted blocks cached
# [endpoint, model, text characters, tokens]: a sample of the model's characters per token
TEXT_SIZE = "c"
# [endpoint, model, sequences beside, excess ms]: a sample of the model's busy cost, what
# the sequences running beside a request added to its TTFT (`routing.rates`)
BUSY = "u"

Event = list[Any]


def hash_bytes(hashes: Sequence[int]) -> bytes:
    return np.asarray(hashes, dtype="<u8").tobytes()


def pack_hashes(hashes: Sequence[int] | bytes) -> str:
    raw = hashes if isinstance(hashes, bytes) else hash_bytes(hashes)
    return base64.b64encode(raw).decode("ascii")


def unpack_hashes(packed: str | bytes) -> tuple[int, ...]:
    """Block hashes from a pick event: raw bytes (binary entries) or base64 text."""
    raw = packed if isinstance(packed, bytes) else base64.b64decode(packed)
    return tuple(np.frombuffer(raw, dtype="<u8").tolist())


@dataclass(frozen=True, slots=True)
class Entry:
    """One decoded stream entry."""

    id: str
    instance: str
    seq: int
    events: list[Event]
    load: dict[str, int] | None = None  # the instance's whole load, on a snapshot flush


def encode(
    instance: str,
    seq: int,
    events: list[Event],
    load: dict[str, int] | None = None,
    *,
    binary: bool = False,
) -> dict[str, str | int | bytes]:
    """Stream entry fields; picks' hashes (bytes, from the outbox) as base64 or, `binary`,
    in the field `h`."""
    blobs: list[bytes] = []
    wire = [_wire(event, blobs if binary else None) for event in events]
    fields: dict[str, str | int | bytes] = {
        "i": instance,
        "s": seq,
        "e": json.dumps(wire, separators=(",", ":")),
    }
    if binary:
        fields["h"] = b"".join(blobs)
    if load is not None:
        fields["l"] = json.dumps(load, separators=(",", ":"))
    return fields


def _wire(event: Event, blobs: list[bytes] | None) -> Event:
    """A pick with bytes hashes as it is written: base64, or (binary) its block count with
    the bytes appended to `blobs`."""
    if event[0] != PICKED or not isinstance(event[3], bytes):
        return event
    if blobs is None:
        return [PICKED, event[1], event[2], pack_hashes(event[3])]
    blobs.append(event[3])
    return [PICKED, event[1], event[2], len(event[3]) // 8]


def _attach_hashes(events: list[Event], blob: bytes) -> bool:
    """Give each pick of a binary entry its slice of `h`; False when they do not match."""
    offset = 0
    for event in events:
        if isinstance(event, list) and len(event) >= 4 and event[0] == PICKED:
            count = event[3]
            if not isinstance(count, int) or count < 0 or offset + 8 * count > len(blob):
                return False
            event[3] = blob[offset : offset + 8 * count]
            offset += 8 * count
    return offset == len(blob)


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
    if b"h" in fields and not _attach_hashes(events, fields[b"h"]):
        return None
    ident = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return Entry(ident, instance, seq, events, load)


def entry_ms(entry_id: str) -> int:
    """Milliseconds since the epoch at which Redis appended the entry (from its id)."""
    return int(entry_id.split("-", 1)[0])

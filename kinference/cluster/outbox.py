"""The cluster journal: this instance's events, queued on the Pick path, flushed in batches.

Appending is a list append (no Redis, no encoding); the flusher packs hashes (to bytes) and
sends one stream entry per flush and shard (several for a large backlog: `Shards.flush`). The
queue is bounded, in events and in the prefix block hashes they carry (a long prompt's pick
holds up to `max_blocks` of them): past either bound the oldest events are dropped and the
next flush tells readers to re-read this instance's load hash instead of trusting the
deltas they missed.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Sequence
from typing import Any

from kinference.cluster import codec

DEFAULT_LIMIT = 200_000  # events held while Redis is unreachable (~ a few minutes of picks)
# Block hashes held in queued events (8 MB as the bytes they are sent as, ~44 MB as the ints a
# pick queues): without it 200,000 events of 64-block picks held 106 MB, of 1024-block picks
# (the default `max_blocks`) ~1 GB.
HASH_LIMIT = 1_000_000
# A flush takes at most this many events and about this many block hashes (one stream entry
# per shard); more waits for the next flush, which follows at once. The first flush after a
# long outage sent the whole outbox as one entry: 200,000 events (25 MB for 64-block picks)
# encoded at once on this loop, decoded and applied at once on every reader's (1.7-4 s held
# there), and while Redis refused, each retry held this loop 10 s (redis-py formats a failed
# command's arguments into its error).
TAKE_EVENTS = 1_000
TAKE_HASHES = 32_768  # 256 KiB as bytes


class Outbox:
    """Implements `kinference.routing.journal.Journal` for a replica in a cluster."""

    def __init__(self, limit: int = DEFAULT_LIMIT, hash_limit: int = HASH_LIMIT) -> None:
        self._events: deque[list[Any]] = deque()
        self._limit = limit
        self._hash_limit = hash_limit
        self.hashes = 0  # block hashes in the queued events
        self.dirty: set[str] = set()  # endpoints whose own load changed since the last flush
        self.dropped = 0  # events lost to the bound since the last flush
        self.dropped_total = 0  # events lost to the bound, ever (a metric)
        self.wakeup = asyncio.Event()  # set when something waits to be flushed
        # Set when an event must go out now (a blacklisting), not after the batch window.
        self.urgent_wakeup = asyncio.Event()

    def __len__(self) -> int:
        return len(self._events)

    def _add(self, event: list[Any], hashes: int = 0) -> None:
        self._events.append(event)
        self.hashes += hashes
        if len(self._events) > self._limit or self.hashes > self._hash_limit:
            self._trim()
        self.wakeup.set()

    def _trim(self) -> None:
        """Drop the oldest events while either bound is exceeded (the newest stays)."""
        events = self._events
        while len(events) > 1 and (len(events) > self._limit or self.hashes > self._hash_limit):
            self.hashes -= hashes_in(events.popleft())
            self.dropped += 1
            self.dropped_total += 1

    def picked(self, endpoint: str, model: str, hashes: Sequence[int]) -> None:
        self.dirty.add(endpoint)
        self._add([codec.PICKED, endpoint, model, hashes], len(hashes))

    def released(self, endpoint: str) -> None:
        self.dirty.add(endpoint)
        self._add([codec.RELEASED, endpoint])

    def first_token(self, endpoint: str, model: str, ttft_ms: float) -> None:
        self._add([codec.FIRST_TOKEN, endpoint, model, ttft_ms])

    def itl(self, endpoint: str, model: str, bucket_counts: Sequence[int]) -> None:
        self._add([codec.ITL, endpoint, model, list(bucket_counts)])

    def served(
        self, endpoint: str, model: str, uncached: float, prefill_ms: float, service_ms: float
    ) -> None:
        self._add([codec.SERVED, endpoint, model, uncached, _measured(prefill_ms),
                   _measured(service_ms)])  # fmt: skip

    def prefilling(
        self, endpoint: str, pick: int, start: int, tokens: float, block_tokens: float
    ) -> None:
        self._add([codec.PREFILLING, endpoint, pick, start, tokens, block_tokens])

    def prefilled(self, endpoint: str, pick: int) -> None:
        self._add([codec.PREFILLED, endpoint, pick])

    def shortfall(self, endpoint: str, hashes: Sequence[int], kept: int, age: int | None) -> None:
        self._add([codec.SHORTFALL, endpoint, codec.pack_hashes(hashes), kept, age], len(hashes))

    def confirmed(self, endpoint: str, age: int | None) -> None:
        self._add([codec.CONFIRMED, endpoint, age])

    def text(self, endpoint: str, model: str, chars: float, tokens: float) -> None:
        self._add([codec.TEXT_SIZE, endpoint, model, chars, tokens])

    def busy(self, endpoint: str, model: str, sequences: float, excess_ms: float) -> None:
        self._add([codec.BUSY, endpoint, model, sequences, excess_ms])

    def engine(self, endpoint: str, reading: dict[str, Any]) -> None:
        self._add([codec.ENGINE, endpoint, reading])

    def cooled(self, provider: str) -> None:
        self._add([codec.COOLED, provider])
        self.urgent_wakeup.set()

    @property
    def urgent(self) -> bool:
        return self.urgent_wakeup.is_set()

    @property
    def backlogged(self) -> bool:
        """More is queued than one flush takes: flush again at once, not after the window."""
        return len(self._events) >= TAKE_EVENTS or self.hashes >= TAKE_HASHES

    def take(self) -> tuple[list[list[Any]], set[str], int]:
        """The oldest queued events, ready to send (at most TAKE_EVENTS of them and about
        TAKE_HASHES hashes; `len` tells what is left): (events, dirty endpoints, events
        dropped)."""
        queue, hashes = self._events, 0
        events: list[list[Any]] = []
        while queue and len(events) < TAKE_EVENTS:
            weight = hashes_in(queue[0])
            if events and hashes + weight > TAKE_HASHES:
                break
            events.append(_wire(queue.popleft()))
            hashes += weight
        self.hashes -= hashes
        taken = (events, self.dirty, self.dropped)
        self.dirty, self.dropped = set(), 0
        self.urgent_wakeup.clear()
        if queue:
            self.wakeup.set()
        else:
            self.wakeup.clear()
        return taken

    def requeue(self, events: list[list[Any]], dirty: set[str]) -> None:
        """Put back a batch that failed to send, ahead of what came since (past the bounds,
        its oldest events are dropped). What the take said was dropped is not put back:
        the failed send owes a snapshot already (`Publisher.deliver`)."""
        self._events.extendleft(reversed(events))
        self.hashes += sum(map(hashes_in, events))
        self._trim()
        self.dirty |= dirty
        if self._events or self.dirty:
            self.wakeup.set()


def hashes_in(event: list[Any]) -> int:
    """Block hashes an event carries: a pick's (ints, or their bytes once taken) or a
    shortfall's (base64 of their bytes)."""
    if event[0] == codec.PICKED:
        hashes = event[3]
        return len(hashes) // 8 if isinstance(hashes, bytes) else len(hashes)
    if event[0] == codec.SHORTFALL:
        return len(event[2]) * 3 // 32  # 4 base64 characters per 3 bytes, 8 bytes a hash
    return 0


def _wire(event: list[Any]) -> list[Any]:
    if event[0] == codec.PICKED and not isinstance(event[3], str | bytes):
        return [codec.PICKED, event[1], event[2], codec.hash_bytes(event[3])]
    return event


def _measured(value: float) -> float | None:
    """NaN (not measured) travels as JSON null."""
    return None if math.isnan(value) else value

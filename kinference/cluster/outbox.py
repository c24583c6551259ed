"""The cluster journal: this instance's events, queued on the Pick path, flushed in batches.

Appending is a list append (no Redis, no encoding); the flusher packs hashes (to bytes) and
sends one stream entry per flush and shard. The queue is bounded: past the bound the oldest
events are dropped and the next flush tells readers to re-read this instance's load hash
instead of trusting the deltas they missed.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Sequence
from typing import Any

from kinference.cluster import codec

DEFAULT_LIMIT = 200_000  # events held while Redis is unreachable (~ a few minutes of picks)


class Outbox:
    """Implements `kinference.routing.journal.Journal` for a replica in a cluster."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self._events: deque[list[Any]] = deque()
        self._limit = limit
        self.dirty: set[str] = set()  # endpoints whose own load changed since the last flush
        self.dropped = 0  # events lost to the bound since the last flush
        self.wakeup = asyncio.Event()  # set when something waits to be flushed
        # Set when an event must go out now (a blacklisting), not after the batch window.
        self.urgent_wakeup = asyncio.Event()

    def __len__(self) -> int:
        return len(self._events)

    def _add(self, event: list[Any]) -> None:
        if len(self._events) >= self._limit:
            self._events.popleft()
            self.dropped += 1
        self._events.append(event)
        self.wakeup.set()

    def picked(self, endpoint: str, model: str, hashes: Sequence[int]) -> None:
        self.dirty.add(endpoint)
        self._add([codec.PICKED, endpoint, model, hashes])

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
        self._add([codec.SHORTFALL, endpoint, codec.pack_hashes(hashes), kept, age])

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

    def take(self) -> tuple[list[list[Any]], set[str], int]:
        """Everything queued, ready to send: (events, dirty endpoints, events dropped)."""
        events = [_wire(event) for event in self._events]
        taken = (events, self.dirty, self.dropped)
        self._events.clear()
        self.dirty, self.dropped = set(), 0
        self.wakeup.clear()
        self.urgent_wakeup.clear()
        return taken

    def requeue(self, events: list[list[Any]], dirty: set[str], dropped: int) -> None:
        """Put back a batch that failed to send, ahead of what came since."""
        room = max(self._limit - len(self._events), 0)
        self.dropped += dropped + max(len(events) - room, 0)
        kept = events[max(len(events) - room, 0) :] if room else []
        self._events.extendleft(reversed(kept))
        self.dirty |= dirty
        if self._events or self.dirty:
            self.wakeup.set()


def _wire(event: list[Any]) -> list[Any]:
    if event[0] == codec.PICKED and not isinstance(event[3], str | bytes):
        return [codec.PICKED, event[1], event[2], codec.hash_bytes(event[3])]
    return event


def _measured(value: float) -> float | None:
    """NaN (not measured) travels as JSON null."""
    return None if math.isnan(value) else value

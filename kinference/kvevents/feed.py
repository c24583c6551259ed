"""One endpoint's subscription (`kvevents.subscriber`): where its events come from, the
worker's trust, and the live batches held while a replay runs (bounded: more are dropped,
a gap seen once the replay ends)."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from kinference.kvcache.pool import PoolCaches
from kinference.kvevents.events import EventBatch
from kinference.kvevents.trust import WorkerTrust

# A held batch: decoded (None: malformed), or a replayed one's payload, decoded when applied.
Held = EventBatch | bytes | None
# Live batches held while a replay runs, and their payloads' bytes. Decoded, a 1 MiB
# prompt's step holds ~1.5 MB of token ids.
MAX_PENDING = 10_000
MAX_PENDING_BYTES = 256 * 1024 * 1024


@dataclass
class Feed:
    """One endpoint's subscription."""

    pool: PoolCaches
    slot: int
    endpoint: str
    address: str
    replay_address: str | None
    topic: bytes
    trust: WorkerTrust
    pending: deque[tuple[int, Held]] = field(default_factory=deque)  # taken from the front
    pending_bytes: int = 0  # their payloads'
    warned: bool = False  # a malformed message was logged since the last good one
    replaying: bool = False
    batches: int = 0
    reconnects: int = 0  # connections ZMQ lost and reconnects by itself (`kvevents.link`)
    reopens: int = 0  # and those it gave up on: the socket reopened
    task: asyncio.Task[None] | None = None
    replay: asyncio.Task[None] | None = None

    def cancel(self) -> None:
        """Stop reading, and replaying."""
        for task in (self.task, self.replay):
            if task is not None:
                task.cancel()

    def dropped(self) -> None:
        """ZMQ gave up on the live connection (`kvevents.link`): reopened after a wait."""
        self.trust.drop()
        self.reopens += 1

    def hold(self, seq: int, batch: EventBatch | None, size: int) -> None:
        """A live batch (its payload `size` bytes) taken while a replay runs, if it fits."""
        if len(self.pending) < MAX_PENDING and self.pending_bytes + size <= MAX_PENDING_BYTES:
            self.pending.append((seq, batch))
            self.pending_bytes += size

"""The engine readings one Pick reads (fresh ones, NaN where unknown or stale)."""

from __future__ import annotations

from dataclasses import dataclass

from kinference.records import record
from kinference.routing.table import FloatArray


@record  # built every Pick
class Signals:
    """Per-slot engine readings for one Pick, NaN where unknown or stale."""

    waiting: FloatArray
    kv_usage: FloatArray
    known: bool = True  # False: no engine reading at all (nothing can be saturated)
    # The queues now (`WorkerTable.queue_now`), for saturation; None: as `waiting`.
    queued: FloatArray | None = None

    @property
    def queue(self) -> FloatArray:
        return self.waiting if self.queued is None else self.queued


@dataclass(frozen=True, slots=True)
class EngineReading:
    """An engine's metrics as scraped; None is unknown."""

    waiting: float | None
    running: float | None
    kv_usage: float | None
    adapters: frozenset[str] = frozenset()
    scraped_at: float | None = None  # on the router's monotonic clock
    kv_capacity_tokens: float | None = None  # tokens its KV cache holds, where it says

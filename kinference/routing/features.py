"""What the scorers read about the candidates of one Pick."""

from __future__ import annotations

from dataclasses import dataclass

from kinference.routing.table import FloatArray, IndexArray, WorkerTable


@dataclass(frozen=True, slots=True)
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
class Features:
    """What the scorers read about the candidates of one Pick."""

    table: WorkerTable
    slots: IndexArray
    model: str
    signals: Signals
    prefix_blocks: FloatArray
    total_blocks: int

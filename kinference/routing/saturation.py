"""When a worker is too busy to take more work: the input of QoS shedding and overflow."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kinference.routing.table import FloatArray

FREE, SATURATED, OVERLOADED = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Saturation:
    """Thresholds from engine metrics. A worker is SATURATED at `queue_depth` waiting
    requests or `kv_cache` KV-cache use, and OVERLOADED at twice the queue or halfway from
    `kv_cache` to full. Unknown metrics never count as saturated."""

    queue_depth: float = 5.0
    kv_cache: float = 0.8

    def levels(self, waiting: FloatArray, kv_usage: FloatArray) -> npt.NDArray[np.int8]:
        """Level per candidate from its (fresh) queue and KV-cache use."""
        if np.isnan(waiting).all() and np.isnan(kv_usage).all():
            return np.zeros(len(waiting), dtype=np.int8)  # nothing known: nothing saturated
        # fmax treats NaN (unknown) as missing: unknown counts as 0, never saturated.
        waiting = np.fmax(waiting, 0.0)
        kv = np.fmax(kv_usage, 0.0)
        saturated = (waiting >= self.queue_depth) | (kv >= self.kv_cache)
        overloaded = (waiting >= 2 * self.queue_depth) | (kv >= (1 + self.kv_cache) / 2)
        levels: npt.NDArray[np.int8] = saturated.astype(np.int8) + overloaded.astype(np.int8)
        return levels

"""Load: fewer requests (in-flight picks plus the engine's queue) scores higher."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from kinference.routing.plugins.base import PickContext
from kinference.routing.scorers.common import load_of
from kinference.routing.table import FloatArray


class QueueScorer:
    """The candidates' load scaled to their spread: the idlest 1, the busiest 0."""

    name: ClassVar[str] = "queue"

    def score(self, ctx: PickContext) -> FloatArray:
        load = load_of(ctx)
        low, high = float(load.min()), float(load.max())
        if high <= low:
            return np.ones_like(load)
        return (high - load) / (high - low)

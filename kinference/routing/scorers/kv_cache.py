"""KV-cache use reported by the engine: lower scores higher; unknown scores as typical."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from kinference.routing.plugins.base import PickContext
from kinference.routing.scorers.common import NEUTRAL, known_or_typical
from kinference.routing.table import FloatArray


class KvCacheScorer:
    name: ClassVar[str] = "kv_cache"

    def score(self, ctx: PickContext) -> FloatArray:
        kv = ctx.signals.kv_usage[ctx.slots]
        if np.isnan(kv).all():
            return np.full(len(kv), NEUTRAL)
        return known_or_typical(1.0 - kv)

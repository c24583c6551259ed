"""Observed latency: TTFT plus a typical decode (EWMA of the reports), best = 1."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from kinference.routing.plugins.base import PickContext
from kinference.routing.scorers.common import NEUTRAL
from kinference.routing.table import FloatArray

DECODE_TOKENS = 64  # a typical decode after the first token


class LatencyScorer:
    name: ClassVar[str] = "latency"

    def score(self, ctx: PickContext) -> FloatArray:
        ttft = ctx.table.ttft_ms(ctx.model)[ctx.slots]
        known = ~np.isnan(ttft)
        if not known.any():
            return np.full(len(ctx.slots), NEUTRAL)
        itl = ctx.table.itl_ms(ctx.model)[ctx.slots]
        itl_known = ~np.isnan(itl)
        typical_itl = float(itl[itl_known].mean()) if itl_known.any() else 0.0
        predicted = ttft + DECODE_TOKENS * np.where(itl_known, itl, typical_itl)
        best = max(float(predicted[known].min()), 1.0)
        return np.where(known, best / np.maximum(predicted, 1.0), NEUTRAL)

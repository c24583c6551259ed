"""Helpers the scorers share: neutral value, load per candidate, unknown-as-typical."""

from __future__ import annotations

import numpy as np

from kinference.routing.plugins.base import PickContext
from kinference.routing.table import FloatArray

NEUTRAL = 0.5  # the score of a candidate nothing is known about


def load_of(ctx: PickContext) -> FloatArray:
    """Requests on each candidate: picks in flight plus the engine's own queue when known."""
    waiting = ctx.signals.waiting[ctx.slots]
    return ctx.table.inflight[ctx.slots] + np.fmax(waiting, 0.0)  # NaN: nothing queued


def known_or_typical(values: FloatArray) -> FloatArray:
    """Unknown values score as the candidates' known average (neutral if none is known),
    so a worker is neither favoured nor shunned for lacking metrics."""
    unknown = np.isnan(values)
    if not unknown.any():
        return values
    typical = float(values[~unknown].mean()) if not unknown.all() else NEUTRAL
    return np.where(unknown, typical, values)

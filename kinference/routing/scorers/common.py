"""Helpers the scorers share: neutral value, load per candidate, unknown-as-typical,
unlearned-as-peers."""

from __future__ import annotations

import math

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


def small_peers_or(array: FloatArray | None, slots: list[int], prior: float) -> list[float]:
    """`peers_or` over the slots' values of `array` (None: nothing learned yet)."""
    if array is None:
        return [prior] * len(slots)
    size = len(array)
    values = [array.item(slot) if slot < size else math.nan for slot in slots]
    if not math.isnan(sum(values)):  # no NaN among them (one NaN makes the sum NaN)
        return values  # (a NaN sum of none, inf - inf, goes on to the test below)
    known = [value for value in values if not math.isnan(value)]
    if len(known) == len(values):
        return values
    fill = sum(known) / len(known) if known else prior
    return [fill if math.isnan(value) else value for value in values]


def peers_or(values: FloatArray, prior: float) -> FloatArray:
    """Unlearned values as the candidates' learned mean, or the prior when none is learned:
    a worker not tried yet is taken to be like its peers, neither shunned (a pessimistic
    prior would never let it be tried) nor favoured."""
    unknown = np.isnan(values)
    if not unknown.any():
        return values
    if unknown.all():
        return np.full(len(values), prior)
    return np.where(unknown, float(values[~unknown].mean()), values)

"""Runs the scorers over one candidate set and lets the picker choose.

Weights are applied generically by scorer name; what a scorer answers is clamped to [0, 1]
(NaN as neutral 0.5) before it is weighted, so no plugin can outvote the others by its
scale. Each plugin's CPU time is counted per name (`PluginCosts`) for the metrics.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kinference.routing.plugins.base import PickContext, Picker, Scorer
from kinference.routing.plugins.pick import home_key
from kinference.routing.table import FloatArray

NEUTRAL = 0.5


@dataclass(slots=True)
class PluginCosts:
    """Calls and CPU nanoseconds spent per plugin name, since start."""

    calls: dict[str, int] = field(default_factory=dict)
    nanoseconds: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, nanoseconds: int) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        self.nanoseconds[name] = self.nanoseconds.get(name, 0) + nanoseconds


def clamped(scores: FloatArray) -> FloatArray:
    """Scores in [0, 1], NaN as neutral (infinities clip to the bounds)."""
    clipped: FloatArray = np.clip(scores, 0.0, 1.0)
    if np.isnan(clipped.sum()):  # one reduction on the common path, not a mask
        clipped = np.where(np.isnan(clipped), NEUTRAL, clipped)
    return clipped


class Pipeline:
    """The weighted scorers (weight > 0 only) and the picker of one policy."""

    def __init__(
        self, scorers: Sequence[tuple[Scorer, float]], picker: Picker, costs: PluginCosts
    ) -> None:
        self.scorers = tuple((scorer, weight) for scorer, weight in scorers if weight > 0)
        self.picker = picker
        self.costs = costs

    def choose(self, ctx: PickContext, rng: random.Random) -> int:
        """The index (into `ctx.slots`) of the chosen candidate."""
        clock, costs = time.perf_counter_ns, self.costs
        totals: FloatArray | None = None
        for scorer, weight in self.scorers:
            started = clock()
            scores = scorer.score(ctx)
            if scores is not None:
                weighted = weight * clamped(scores)
                totals = weighted if totals is None else totals + weighted
            costs.add(scorer.name, clock() - started)
        if totals is None:  # nothing told the candidates apart: all tie
            totals = np.zeros(len(ctx.slots))
        started = clock()
        # (a list's any: a numpy reduction costs more on a handful of candidates)
        home = None if any(ctx.cached_tokens.tolist()) else home_key(ctx.hashes)
        if home is None:
            index = self.picker.pick(totals, rng)
        else:  # a prefix no candidate holds: near ties go to its home
            endpoints = ctx.table.endpoints
            names = [endpoints[slot] for slot in ctx.slots.tolist()]
            index = self.picker.pick(totals, rng, home, names)
        costs.add(self.picker.name, clock() - started)
        return index

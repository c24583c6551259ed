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
from math import isnan
from typing import Protocol, cast, runtime_checkable

import numpy as np

from kinference.routing.filters.saturation import OWN_HIT_SHARE, SaturationFilter, free_positions
from kinference.routing.plugins.base import PickContext, Picker, Scorer
from kinference.routing.plugins.pick import MaxScorePicker, home_key
from kinference.routing.table import FloatArray

NEUTRAL = 0.5
# Up to this many candidates the weighted totals are summed on Python floats (numpy's fixed
# cost per call is then the larger one); past it, as arrays. Both give the same totals.
SMALL_TOTALS = 16
SATURATED = -1  # `choose`'s answer where its guard finds a candidate saturated


@dataclass(slots=True)
class PluginCosts:
    """Calls and CPU nanoseconds spent per plugin name, since start."""

    # name -> [calls, nanoseconds]: one lookup a Pick step (read rarely, by the metrics)
    totals: dict[str, list[int]] = field(default_factory=dict)

    @property
    def calls(self) -> dict[str, int]:
        return {name: total[0] for name, total in self.totals.items()}

    @property
    def nanoseconds(self) -> dict[str, int]:
        return {name: total[1] for name, total in self.totals.items()}

    def add(self, name: str, nanoseconds: int) -> None:
        total = self.totals.get(name)
        if total is None:
            self.totals[name] = [1, nanoseconds]
        else:
            total[0] += 1
            total[1] += nanoseconds


def clamped(scores: FloatArray) -> FloatArray:
    """Scores in [0, 1], NaN as neutral (infinities clip to the bounds)."""
    clipped: FloatArray = np.clip(scores, 0.0, 1.0)
    if np.isnan(clipped.sum()):  # one reduction on the common path, not a mask
        clipped = np.where(np.isnan(clipped), NEUTRAL, clipped)
    return clipped


@runtime_checkable
class FusedScorer(Protocol):
    """A scorer that, as the only one answering, also makes the choice in one native call
    for a small candidate set (the TTFT scorer: `_ttft.choose`)."""

    def choose_small(
        self, ctx: PickContext, weight: float, home: int | None, ids: object,
        guard: tuple[object, object, float, float, float] | None = None,
    ) -> tuple[int, FloatArray] | None: ...  # fmt: skip


# (the other scorers go with their positions in `Pipeline.scorers`)
Fused = tuple[FusedScorer, str, float, tuple[tuple[int, Scorer], ...], MaxScorePicker]
# What the other scorers were asked already (by `routing.settle`, or the fused path), by
# position: (answer, CPU nanoseconds); `choose` takes those answers instead of asking again.
Asked = dict[int, tuple[FloatArray | None, int]]


class Pipeline:
    """The weighted scorers (weight > 0 only) and the picker of one policy.

    With `MaxScorePicker` and a `FusedScorer` among the scorers, a set of up to
    `SMALL_TOTALS` candidates is scored and chosen in one C call when every other scorer
    answers None (at the defaults, the LoRA scorer with no adapter loaded): the same
    totals and the same choice as the general path (tests/native/test_choose.py), the
    random tie-break and a cold prefix's home without ids left to the picker. `fused=False`
    forces the general path."""

    def __init__(
        self, scorers: Sequence[tuple[Scorer, float]], picker: Picker, costs: PluginCosts,
        *, fused: bool = True,
    ) -> None:  # fmt: skip
        self.scorers = tuple((scorer, weight) for scorer, weight in scorers if weight > 0)
        self.picker = picker
        self.costs = costs
        # (the fused scorer, its name and weight, the other scorers, the picker): checked
        # here once (a runtime Protocol's isinstance costs µs)
        self._fused: Fused | None = None
        found = [(s, w) for s, w in self.scorers if isinstance(s, FusedScorer)]
        if fused and found and isinstance(picker, MaxScorePicker):
            scorer, weight = found[0]
            others = tuple(
                (position, other)
                for position, (other, _) in enumerate(self.scorers)
                if other is not scorer
            )
            fusing = cast(FusedScorer, scorer)
            self._fused = (fusing, scorer.name, weight, others, picker)

    def fuses(self, candidates: int) -> bool:
        """Whether a Pick over this many candidates is chosen in one C call, where it is
        built (`guard` then checks saturation there too)."""
        return candidates <= SMALL_TOTALS and self._fused is not None

    def choose(
        self, ctx: PickContext, rng: random.Random, guard: SaturationFilter | None = None,
        asked: Asked | None = None,
    ) -> int:  # fmt: skip
        """The index (into `ctx.slots`) of the chosen candidate; with `guard`, SATURATED
        (nothing chosen, no scorer run) where it finds a candidate saturated by
        `ctx.signals` (`levels_with_hits_in`). `asked`: the scorers asked already for
        `ctx` (`routing.settle`), not asked again (the dict is written to)."""
        small = len(ctx.slots) <= SMALL_TOTALS
        if asked is None:
            asked = {}
        if small and self._fused is not None:
            index = self._choose_fused(ctx, rng, guard, self._fused, asked)
            if index is not None:
                return index
        if guard is not None and _saturated(guard, ctx):
            return SATURATED
        clock, add = time.perf_counter_ns, self.costs.add
        listed: list[float] | None = None  # the totals as Python floats (`small`)
        vector: FloatArray | None = None
        started = clock()  # each step's time runs from the end of the one before
        for position, (scorer, weight) in enumerate(self.scorers):
            answer = asked.get(position)  # (asked already by the fused path: not again)
            scores = scorer.score(ctx) if answer is None else answer[0]
            if scores is not None and small:
                listed = _weighted_small(listed, weight, scores.tolist())
            elif scores is not None:
                vector = _weighted(vector, weight, scores)
            now = clock()
            add(scorer.name, now - started + (0 if answer is None else answer[1]))
            started = now
        # Python floats go to the picker as they are (it reads a handful of them as such)
        totals: FloatArray | list[float] = (
            listed if listed is not None else vector if vector is not None
            else [0.0] * len(ctx.slots)  # nothing told the candidates apart: all tie
        )  # fmt: skip
        # (a list's any: a numpy reduction costs more on a handful of candidates)
        home = None if any(ctx.cached_tokens.tolist()) else home_key(ctx.hashes)
        if home is None:
            index = self.picker.pick(totals, rng)
        else:  # a prefix no candidate holds: near ties go to its home
            endpoints = ctx.table.endpoints
            names = [endpoints[slot] for slot in ctx.slots.tolist()]
            index = self.picker.pick(totals, rng, home, names)
        add(self.picker.name, clock() - started)
        return index

    def _choose_fused(
        self, ctx: PickContext, rng: random.Random, guard: SaturationFilter | None,
        fused: Fused, asked: Asked,
    ) -> int | None:  # fmt: skip
        """`choose` by the fused scorer's one C call; None where another scorer answers or
        the C form is not taken (the general path then runs, with the other scorers'
        answers left in `asked`)."""
        clock = time.perf_counter_ns
        started = clock()
        scorer, name, weight, others, picker = fused
        for position, other in others:
            known = asked.get(position)  # (by `routing.settle`: a None)
            scores = other.score(ctx) if known is None else known[0]
            if scores is not None:  # (the time so far is the others' asking: its)
                _asked(asked, others, position, scores, clock() - started)
                return None
        table, checks = ctx.table, None
        if guard is not None:
            signals, config = ctx.signals, guard.config
            own = OWN_HIT_SHARE * max(ctx.prompt_tokens, 1.0)
            checks = (signals.queue, signals.kv_usage, float(config.queue_depth),
                      float(config.kv_cache), float(own))  # fmt: skip
        key = home_key(ctx.hashes)
        chosen = scorer.choose_small(ctx, weight, key, picker.slot_ids(table.endpoints),
                                     checks)  # fmt: skip
        if chosen is None:  # (every other answered None: the general path asks none again)
            _asked(asked, others, len(self.scorers), None, 0)
            return None
        index, totals = chosen
        if index == -2:  # a candidate saturated: nothing computed
            return SATURATED
        if index < 0:  # equal bests, or a cold prefix's near bests: the picker's own way
            listed = totals.tolist()
            home = None if any(ctx.cached_tokens.tolist()) else key
            if home is None:
                index = picker.pick(listed, rng)
            else:
                names = [table.endpoints[slot] for slot in ctx.slots.tolist()]
                index = picker.pick(listed, rng, home, names)
        add = self.costs.add
        add(name, clock() - started)  # the others' asking, scores and choice
        for _, other in others:
            add(other.name, 0)
        add(picker.name, 0)
        return index


def _asked(
    asked: Asked, others: tuple[tuple[int, Scorer], ...], last: int,
    scores: FloatArray | None, nanoseconds: int,
) -> None:  # fmt: skip
    """Into `asked`: the others before position `last` answered None; the one at `last`
    (if one is) answered `scores`, taking `nanoseconds` (all the others' asking)."""
    for position, _ in others:
        if position < last:
            asked[position] = (None, 0)
        elif position == last:
            asked[position] = (scores, nanoseconds)


def _saturated(guard: SaturationFilter, ctx: PickContext) -> bool:
    """Whether `guard` shows a candidate of `ctx` above FREE, counting its cache hits."""
    levels = guard.levels_with_hits_in(ctx.signals, ctx.slots, ctx)
    return len(free_positions(levels)) < len(ctx.slots)


def _weighted(totals: FloatArray | None, weight: float, scores: FloatArray) -> FloatArray:
    weighted = weight * clamped(scores)
    return weighted if totals is None else totals + weighted


def _weighted_small(totals: list[float] | None, weight: float, scores: list[float]) -> list[float]:
    """`_weighted` on Python floats, for a handful of candidates (numpy's fixed cost per
    call is then the larger one): the same clamp and the same IEEE products and sums, so
    the same totals."""
    weighted = [
        weight * (NEUTRAL if isnan(score) else min(max(score, 0.0), 1.0)) for score in scores
    ]
    if totals is None:
        return weighted
    return [total + value for total, value in zip(totals, weighted, strict=True)]

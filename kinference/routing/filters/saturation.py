"""Saturation, the input of QoS shedding and overflow: when a worker is too busy for more.

A worker is SATURATED at `queue_depth` waiting requests or `kv_cache` KV-cache use, and
OVERLOADED at twice the queue or halfway from `kv_cache` to full. Unknown metrics never
count as saturated. A worker predicted to hold at least `OWN_HIT_SHARE` of the request's
prompt is judged by its queue alone: the request adds little to its KV cache there (its
cached blocks are shared, only its decode is new), and the KV use may be mostly that very
prefix (engines and simulators that count a shared document once per running request
would otherwise turn a document's requests away from the one worker holding it). The
filter keeps the free workers; the router keeps the levels of a pool with none free for
QoS (batch on a busy worker, shed, overflow).
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import numpy.typing as npt
from pydantic import Field, PositiveInt

from kinference.routing.features import Signals
from kinference.routing.plugins.base import PickContext
from kinference.routing.plugins.config import PluginConfig
from kinference.routing.table import FloatArray, IndexArray

FREE, SATURATED, OVERLOADED = 0, 1, 2
OWN_HIT_SHARE = 0.5  # of the prompt predicted cached on a worker: its KV use is not ours
# Up to this many candidates `any_saturated` answers on Python floats (numpy's fixed cost
# per call is then the larger one: `levels` makes a dozen calls).
SMALL_CANDIDATES = 16
Levels = npt.NDArray[np.int8]


class SaturationConfig(PluginConfig):
    """A worker is saturated when either engine signal reaches its threshold."""

    queue_depth: PositiveInt = 5  # requests waiting in the engine's queue
    kv_cache: float = Field(default=0.8, gt=0.0, le=1.0)  # fraction of KV cache in use


class SaturationFilter:
    name: ClassVar[str] = "saturation"

    def __init__(self, config: SaturationConfig) -> None:
        self.config = config

    def filter(self, ctx: PickContext, slots: IndexArray) -> IndexArray:
        kept: IndexArray = slots[self.levels_of(ctx, slots) < SATURATED]
        return kept

    def levels_of(self, ctx: PickContext, slots: IndexArray) -> Levels:
        signals = ctx.signals
        if not signals.known:
            return np.zeros(len(slots), dtype=np.int8)
        return self.levels(signals.queue[slots], signals.kv_usage[slots])

    def levels(self, waiting: FloatArray, kv_usage: FloatArray) -> Levels:
        """Level per candidate from its (fresh) queue and KV-cache use."""
        if np.isnan(waiting).all() and np.isnan(kv_usage).all():
            return np.zeros(len(waiting), dtype=np.int8)  # nothing known: nothing saturated
        # fmax treats NaN (unknown) as missing: unknown counts as 0, never saturated.
        waiting = np.fmax(waiting, 0.0)
        kv = np.fmax(kv_usage, 0.0)
        queue, full = self.config.queue_depth, self.config.kv_cache
        saturated = (waiting >= queue) | (kv >= full)
        overloaded = (waiting >= 2 * queue) | (kv >= (1 + full) / 2)
        levels: Levels = saturated.astype(np.int8) + overloaded.astype(np.int8)
        return levels

    def any_saturated_in(self, signals: Signals, slots: IndexArray) -> bool:
        """Whether `levels` shows any of `slots` above FREE by `signals`."""
        queue, kv_usage = signals.queue, signals.kv_usage
        if len(slots) <= SMALL_CANDIDATES:  # told on Python floats
            return self.any_saturated(queue, kv_usage, slots.tolist())
        return bool(self.levels(queue[slots], kv_usage[slots]).any())

    def levels_with_hits_in(
        self, signals: Signals, slots: IndexArray, ctx: PickContext
    ) -> Levels | list[int]:
        """`levels_with_hits` of `slots` by `signals` and the Pick's `ctx` over them (a
        list for a handful of candidates: `free_positions` reads either)."""
        queue, kv_usage = signals.queue, signals.kv_usage
        if len(slots) <= SMALL_CANDIDATES:  # on Python floats
            return self.levels_with_hits_of(
                queue, kv_usage, slots.tolist(), ctx.cached_tokens.tolist(), ctx.prompt_tokens
            )
        return self.levels_with_hits(
            queue[slots], kv_usage[slots], ctx.cached_tokens, ctx.prompt_tokens
        )

    def any_saturated(self, queue: FloatArray, kv_usage: FloatArray, slots: list[int]) -> bool:
        """Whether `levels` of the `slots`' queues and KV-cache use would show any of them
        above FREE, on Python floats: every threshold is positive, so an unknown (NaN) or
        negative reading, which `levels` takes as 0, is below it as it is; and a level
        above FREE is SATURATED at least (OVERLOADED's thresholds are above SATURATED's)."""
        depth, full = self.config.queue_depth, self.config.kv_cache
        item, kv = queue.item, kv_usage.item
        return any(item(slot) >= depth or kv(slot) >= full for slot in slots)

    def levels_with_hits(
        self, waiting: FloatArray, kv_usage: FloatArray, cached: FloatArray, prompt: float
    ) -> Levels:
        """`levels`, the KV-cache signal left out where the request's prompt is mostly
        cached (`cached` tokens of `prompt`, per candidate)."""
        hit = cached >= OWN_HIT_SHARE * max(prompt, 1.0)
        return self.levels(waiting, np.where(hit, np.nan, kv_usage))

    def levels_with_hits_of(
        self, queue: FloatArray, kv_usage: FloatArray, slots: list[int], cached: list[float],
        prompt: float,
    ) -> list[int]:  # fmt: skip
        """`levels_with_hits` of the `slots`' readings on Python floats, for a handful of
        candidates (`cached`: aligned with `slots`). As in `any_saturated`, an unknown (NaN)
        or negative reading is below every threshold as it is, which `levels` makes 0."""
        depth, full = self.config.queue_depth, self.config.kv_cache
        over_depth, over_full = 2 * depth, (1 + full) / 2
        own = OWN_HIT_SHARE * max(prompt, 1.0)
        item, kv = queue.item, kv_usage.item
        levels = []
        for slot, hit in zip(slots, cached, strict=True):
            waiting, used = item(slot), math.nan if hit >= own else kv(slot)
            saturated = waiting >= depth or used >= full
            levels.append(saturated + (waiting >= over_depth or used >= over_full))
        return levels


def free_positions(levels: Levels | list[int]) -> list[int]:
    """The positions of the candidates `levels` shows FREE, in order."""
    if isinstance(levels, list):
        return [position for position, level in enumerate(levels) if level < SATURATED]
    free: list[int] = np.flatnonzero(levels < SATURATED).tolist()
    return free

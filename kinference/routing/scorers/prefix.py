"""Prefix-cache affinity: the share of the prompt predicted cached on each candidate.

Read from `PickContext.cached_tokens` (the pool's cached-tokens source). When load is far
out of balance, affinity yields (sglang-router's balance override), or with `fade` each
candidate keeps `1 - excess/abs_threshold` of it, `excess` being its load over the idlest.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from pydantic import Field, NonNegativeFloat

from kinference.routing.plugins.base import PickContext
from kinference.routing.plugins.config import PluginConfig
from kinference.routing.scorers.common import load_of
from kinference.routing.table import FloatArray


class BalanceConfig(PluginConfig):
    """When load wins over cache affinity in the prefix scorer (`routing.balance`).

    Load is in-flight picks plus the engine's queue. The pool is imbalanced when the most
    loaded candidate has more than `abs_threshold` requests over the least loaded one AND
    more than `rel_threshold` times its load; then affinity counts for nothing.
    """

    abs_threshold: NonNegativeFloat = 16.0  # requests
    rel_threshold: float = Field(default=1.5, ge=1.0)  # ratio of most to least loaded
    # Instead of all-or-nothing: each candidate keeps 1 - excess/abs_threshold of its
    # affinity, excess being the requests it carries over the idlest candidate.
    fade: bool = False


class PrefixScorer:
    name: ClassVar[str] = "prefix"

    def __init__(self, balance: BalanceConfig) -> None:
        self.balance = balance

    def score(self, ctx: PickContext) -> FloatArray:
        if ctx.prompt_tokens <= 0 or not ctx.cached_tokens.any():
            return np.zeros(len(ctx.slots))
        share = ctx.cached_tokens / ctx.prompt_tokens
        load = load_of(ctx)
        low, high = float(load.min()), float(load.max())
        balance = self.balance
        if balance.fade:
            return share * _kept(load, low, balance)
        if high - low > balance.abs_threshold and high > balance.rel_threshold * low:
            return np.zeros(len(ctx.slots))
        return share


def _kept(load: FloatArray, low: float, balance: BalanceConfig) -> FloatArray:
    """Share of its affinity each candidate keeps under `fade`."""
    excess = load - low
    if balance.abs_threshold <= 0:
        kept = (excess <= 0).astype(np.float64)
    else:
        kept = np.clip(1.0 - excess / balance.abs_threshold, 0.0, 1.0)
    return np.where(load > balance.rel_threshold * low, kept, 1.0)

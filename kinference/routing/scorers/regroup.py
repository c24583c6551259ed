"""Moving a prefix group to a faster engine: one cold prefill now for faster hits after it.

A greedy TTFT pick never moves a group of requests sharing a prefix (a system prompt, a
document): a hit on the engine holding it beats a cold prefill anywhere else, however slow
that engine is, though every later request of the group would be served faster where it
moved. Groups are placed first before any engine's speed is learned, so on engines of
unequal speed about half of them stay on slow ones for good.

This term credits a cold candidate with the expected saving of the group's further
requests there:

    credit = expected * max((base_h - base_j) + tail * (per_token_h - per_token_j), 0)

`h` is the holder (the candidate with the most cached tokens), `j` a candidate holding
less, `tail` the prompt tokens beyond the holder's cached ones (what a later hit prefills),
`expected` the group's further requests: its Picks seen in about the last `horizon_s`
(a count decayed with that time constant), taken as as many again to come (a group seen
for a while is expected to last as long again; at a steady rate of `r` a second the count
tends to `r * horizon_s`). The prefix is named by its chained block hash at a power of two
of blocks, the largest within what the holder holds (`CHECKPOINTS`): a shared system
prompt's requests count together, a long chat's own history only its turns. A credited
candidate's cost is its predicted TTFT less the credit (`scorers.ttft`): it is idle, so
its cold prefill delays no one queued there, and the blocks it takes replace the holder's
copy, which the group leaves.

It applies only where both speeds are learned (`routing.rates`) and `j`'s prefill is
faster by `speed_margin` or more, and only to a candidate with no predicted wait (a free
batch slot, no prefill pending ahead): engines alike in speed, or not learned yet, are
never credited. The counts are each replica's own (its Picks; with several replicas the
expected further requests are undercounted, so the term moves groups later, not sooner).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from pydantic import NonNegativeFloat, PositiveInt

from kinference.routing.plugins.base import PickContext
from kinference.routing.plugins.config import PluginConfig
from kinference.routing.rates import Rates

# Depths (blocks) at which a prompt's prefix is counted: 16 blocks is 1 KiB of text.
CHECKPOINTS = (16, 32, 64, 128, 256, 512, 1024)


class RegroupConfig(PluginConfig):
    """When a cold candidate is credited with its faster hits to come (`routing.regroup`)."""

    # Seconds ahead over which a group's further requests are counted (and the time
    # constant of their decayed count); 0 turns the term off. A shared prompt's group lives
    # for minutes to hours: half a minute is cautious.
    horizon_s: NonNegativeFloat = 30.0
    # A candidate is credited only if the holder's learned prefill is this share slower a
    # token or more (0.5: the holder 1.5x slower); alike engines' learned rates differ by
    # up to ~30 % on a shared host.
    speed_margin: NonNegativeFloat = 0.5
    max_prefixes: PositiveInt = 4096  # prefixes whose recent Picks are counted (LRU)


class PrefixDemand:
    """Decayed counts of recent Picks per prefix (chained block hash), LRU-bounded."""

    def __init__(self, horizon_s: float, size: int, clock: Callable[[], float]) -> None:
        self.horizon_s = horizon_s
        self.size = size
        self.clock = clock
        self._counts: OrderedDict[int, tuple[float, float]] = OrderedDict()  # (count, at)

    def seen(self, hashes: Sequence[int]) -> None:
        """Count one Pick of a prompt at each checkpoint its blocks reach (none at a
        horizon of 0: the term is off)."""
        if self.horizon_s <= 0.0:
            return
        now, counts = self.clock(), self._counts
        for depth in CHECKPOINTS:
            if depth > len(hashes):
                break
            key = hashes[depth - 1]
            counts[key] = (self._decayed(key, now) + 1.0, now)
            counts.move_to_end(key)
        while len(counts) > self.size:
            counts.popitem(last=False)

    def expected(self, hashes: Sequence[int], blocks: int) -> float:
        """The decayed count of the prefix of `blocks` leading blocks (at its checkpoint)."""
        depth = max((d for d in CHECKPOINTS if d <= min(blocks, len(hashes))), default=0)
        return self._decayed(hashes[depth - 1], self.clock()) if depth else 0.0

    def _decayed(self, key: int, now: float) -> float:
        entry = self._counts.get(key)
        if entry is None:
            return 0.0
        count, at = entry
        return count * math.exp(-max(now - at, 0.0) / self.horizon_s)


class Regroup:
    """The credit per candidate, milliseconds (`credits`), from the learned rates."""

    def __init__(
        self, config: RegroupConfig, rates: Rates, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self.rates = rates
        self.demand = PrefixDemand(config.horizon_s, config.max_prefixes, clock)

    def costs(self, ctx: PickContext, costs: list[float], predicted: list[float]) -> list[float]:
        """The candidates' costs with a credited one's as its predicted TTFT less the credit
        (it is idle: its cold prefill delays no one queued there, and the blocks it takes
        replace the holder's copy, which the group leaves)."""
        credits = self.credits(ctx, len(ctx.hashes) / max(ctx.prompt_tokens, 1.0))
        if credits is None:
            return costs
        moved = zip(costs, predicted, credits, strict=True)
        return [ttft - credit if credit > 0.0 else cost for cost, ttft, credit in moved]

    def credits(self, ctx: PickContext, blocks_per_token: float) -> list[float] | None:
        """Milliseconds to take off each candidate's cost (None: none credited). Counts
        this Pick (after reading the count before it). `blocks_per_token`: approximate
        blocks a cached token stands for (the holder's depth in blocks)."""
        if self.config.horizon_s <= 0.0 or not ctx.hashes:
            return None
        cached = ctx.cached_tokens.tolist()
        holder = max(range(len(cached)), key=cached.__getitem__)
        depth = int(cached[holder] * blocks_per_token)
        expected = self.demand.expected(ctx.hashes, depth) if cached[holder] > 0.0 else 0.0
        self.demand.seen(ctx.hashes)
        if expected <= 0.0 or ctx.predicted_wait_ms is None:
            return None
        return self._credits(ctx, holder, cached, expected)

    def _credits(
        self, ctx: PickContext, holder: int, cached: list[float], expected: float
    ) -> list[float] | None:
        slots, learned, model = ctx.slots.tolist(), self.rates.learned, ctx.model
        slow = learned(model, "prefill_ms_per_token", slots[holder])
        if math.isnan(slow):
            return None
        slow_base = learned(model, "prefill_base_ms", slots[holder])
        tail = max(ctx.prompt_tokens - cached[holder], 0.0)
        waits = ctx.predicted_wait_ms.tolist() if ctx.predicted_wait_ms is not None else []
        out, any_credit = [0.0] * len(slots), False
        for i, slot in enumerate(slots):
            fast = learned(model, "prefill_ms_per_token", slot)
            if cached[i] >= cached[holder] or waits[i] > 0.0 or math.isnan(fast):
                continue
            if slow < (1.0 + self.config.speed_margin) * fast:
                continue
            base = learned(model, "prefill_base_ms", slot)
            base_saving = 0.0 if math.isnan(base) or math.isnan(slow_base) else slow_base - base
            saving = base_saving + tail * (slow - fast)
            if saving > 0.0:
                out[i], any_credit = expected * saving, True
        return out if any_credit else None

"""The TTFT cost's cache-space term: what share of a request's new blocks would evict
blocks a worker holds, and so cost their prefill again to whoever reuses them.

A worker's cache keeps `capacity` blocks (the prefix index's estimate, `PrefixIndex.
capacities`, learned from reported cached tokens); it holds `footprint` of them (the blocks
the index holds there) and the request adds `new`, its blocks not cached there. What goes
is what does not fit, and no more than the worker holds:

    evicted  = min(footprint, max(footprint + new - capacity, 0))
    share    = evicted / new          (0 where nothing new is placed)

`new` is the prompt's index blocks (`PickContext.hashes`) in proportion to its uncached
tokens there, the unit the footprint and the capacity count. A worker whose capacity is
not learned yet takes its fellow candidates' learned mean, and where none is learned, the
most blocks any candidate holds: the index already takes every worker to hold what it
recorded there (it predicts those hits), so a cache of that size is the smallest it
believes in. A worker with room for the prompt then pays nothing, the fullest candidate
pays for its whole prompt (up to what it holds), and one between for what does not fit
(before, the share was the footprint over the fullest candidate's: a worker holding one
document paid 0.76 of a 120-block prompt's prefill beside one holding 1,000 blocks,
though its 1,536-block cache had room, h116).
"""

from __future__ import annotations

import math

from kinference.routing.plugins.base import PickContext


def spill(ctx: PickContext) -> list[float] | None:
    """Per candidate, the share of the request's new blocks that would evict held ones
    (0-1); None where the footprint is not known (no term)."""
    footprint = ctx.footprint
    if footprint is None:
        return None
    capacity = ctx.capacity
    if capacity is None or len(capacity) != len(footprint):
        capacity = [math.nan] * len(footprint)
    known = [blocks for blocks in capacity if not math.isnan(blocks)]
    if len(known) < len(capacity):
        fill = sum(known) / len(known) if known else max(footprint, default=0.0)
        capacity = [fill if math.isnan(blocks) else blocks for blocks in capacity]
    prompt, blocks = ctx.prompt_tokens, float(len(ctx.hashes))
    try:
        per_token = blocks / prompt if prompt > 0.0 else 0.0
    except OverflowError:  # an int no float holds: the TTFT terms fail on it alike
        return None
    cached = ctx.cached_tokens.tolist()
    shares = []
    for i, held in enumerate(footprint):
        new = max(prompt - cached[i], 0.0) * per_token if i < len(cached) else 0.0
        if not new > 0.0:  # nothing placed (NaN too)
            shares.append(0.0)
            continue
        evicted = min(held, max(held + new - capacity[i], 0.0))
        shares.append(min(evicted / new, 1.0))
    return shares

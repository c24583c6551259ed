"""A precise pool's cached tokens made exact only where they could change the choice.

Replaying a worker's queue (`PoolCaches.surviving`: which of its cached blocks the requests
ahead will have evicted when this one runs) is the costly part of a precise Pick, and a
Pick asks every candidate. Before it, a candidate's index match (pending blocks included)
is an upper bound of its cached tokens; the Pick's context starts with those bounds
(`PreciseCachedTokens.match_lazily`) and `settle` replays only the candidates whose exact
value could change what the Pick decides or records.

Why that is exact, where it is used: with the TTFT scorer the only one answering and the
max-score picker (the defaults), each candidate's cost depends on its own cached tokens
alone, and never rises with them (prefill = uncached tokens times a rate clamped at 0;
every weight is non-negative), unless a candidate is the pool's probe (`doubt.
needed_probes` compares candidates' prefills: then everything is settled). So an
unsettled candidate's cost with its bound is at most its exact cost, and its total at
least its exact total. Settled first, in order of their totals, are the candidates whose
total reaches the picker's floor (the best total less its tie, or for a prefix nobody
holds its home tolerance: `plugins.pick`); none left above it, the best total is a
settled candidate's, the same as with every value exact, and so are the floor, the set
of candidates at or above it, their totals and order, hence the choice, the random
draw's use and everything recorded of the chosen one. Also settled: candidates whose
bound could be what makes some candidate hold the prompt at all (the picker's home
applies only where none does) and, with the saturation guard, those whose bound could
hide their KV-cache reading as the request's own hit (`levels_with_hits`). Any other
scorer answering, or a NaN score: everything is settled.
"""

from __future__ import annotations

from math import isnan

from kinference.routing.filters.saturation import OWN_HIT_SHARE, SaturationFilter
from kinference.routing.plugins.base import PickContext, Unsettled
from kinference.routing.plugins.pick import HOME_TOLERANCE, TIE, MaxScorePicker
from kinference.routing.plugins.pipeline import Asked, Pipeline
from kinference.routing.scorers.ttft import TtftScorer

# Totals this close (relative) to the floor count as reaching it: covers a rounding of
# the pipeline's totals other than this module's (the C choice), never one that matters.
SLACK = 1e-9


def settle(pipeline: Pipeline, ctx: PickContext, guard: SaturationFilter | None) -> Asked | None:
    """Makes `ctx.cached_tokens` exact (in place) wherever that could change the choice
    `pipeline.choose(ctx, rng, guard)` makes or what it records of the chosen candidate
    (the others' may stay upper bounds: `ctx.unsettled`). Answers what it asked the other
    scorers that answered None, for `choose` not to ask them again (None: it asked none).
    A scorer's None (nothing tells the candidates apart: the LoRA scorer with no adapter
    loaded) does not depend on the cached tokens made exact here."""
    unsettled = ctx.unsettled
    if unsettled is None or not unsettled.positions:
        return None
    asked: Asked = {}
    sole = _sole_ttft(pipeline, ctx, asked)
    if sole is None:
        unsettled.complete(ctx.cached_tokens)
        return asked
    scorer, weight = sole
    parts = scorer.parts(ctx.table, ctx.slots, ctx.model, ctx.signals.waiting, ctx.pool_slots)
    if parts.probes.any() or not (parts.per_token >= 0.0).all():
        unsettled.complete(ctx.cached_tokens)
        return asked
    if guard is not None:
        _settle_hits(guard, ctx, unsettled)
    written = ctx.predicted_ttft_ms, ctx.predicted_wait_ms, ctx.sequences, ctx.probes
    while unsettled.positions:
        position = _deciding(ctx, unsettled, scorer, weight)
        if position is None:
            break
        unsettled.settle(ctx.cached_tokens, position)
    # (the scorer's answers here were on bounds: the choice writes its own)
    ctx.predicted_ttft_ms, ctx.predicted_wait_ms, ctx.sequences, ctx.probes = written
    return asked


def _sole_ttft(
    pipeline: Pipeline, ctx: PickContext, asked: Asked
) -> tuple[TtftScorer, float] | None:
    """The TTFT scorer and its weight where it is the only scorer answering for `ctx` and
    the picker is the max-score one; else None. The others' None answers go in `asked`
    (by position in `pipeline.scorers`)."""
    if not isinstance(pipeline.picker, MaxScorePicker):
        return None
    found = None
    for position, (scorer, weight) in enumerate(pipeline.scorers):
        if isinstance(scorer, TtftScorer):
            found = (scorer, weight)
        elif scorer.score(ctx) is not None:  # (asked again by `choose`: on exact values)
            return None
        else:
            asked[position] = (None, 0)
    return found


def _settle_hits(guard: SaturationFilter, ctx: PickContext, unsettled: Unsettled) -> None:
    """Settles the candidates whose bound counts as the request's own hit there while
    their KV-cache reading is at the guard's threshold (the hit would hide it)."""
    own = OWN_HIT_SHARE * max(ctx.prompt_tokens, 1.0)
    kv, full = ctx.signals.kv_usage, guard.config.kv_cache
    slots = ctx.slots.tolist()
    for position in list(unsettled.positions):
        if ctx.cached_tokens.item(position) >= own and kv.item(slots[position]) >= full:
            unsettled.settle(ctx.cached_tokens, position)


def _deciding(
    ctx: PickContext, unsettled: Unsettled, scorer: TtftScorer, weight: float
) -> int | None:
    """The next unsettled candidate whose exact value could change the choice (the one
    with the best total of those reaching the floor), or None: none could."""
    cached, pending = ctx.cached_tokens.tolist(), unsettled.positions
    if not any(value for i, value in enumerate(cached) if i not in pending):
        holding = [i for i in pending if cached[i]]
        if holding:  # whether any candidate holds the prompt decides the home: one settled
            return max(holding, key=cached.__getitem__)
    scores = scorer.score(ctx).tolist()  # (its writes to `ctx` are the choice's again)
    if any(isnan(score) for score in scores):
        return pending[0]
    totals = [weight * min(max(score, 0.0), 1.0) for score in scores]
    best = max(totals)
    tolerance = TIE if any(cached) else max(abs(best) * HOME_TOLERANCE, TIE)
    floor = best - tolerance - SLACK * max(abs(best), 1.0)
    reaching = [i for i in pending if totals[i] >= floor]
    return max(reaching, key=totals.__getitem__) if reaching else None

"""Choosing a worker of a pool: the Pick's context (the prompt's blocks, each candidate's
cached tokens), the plugin pipeline's choice, and the LocalChoice that carries it.

A mixin of `Router` (`kinference.routing.router`), which owns the state read here.
"""

from __future__ import annotations

import random
from typing import cast

from kinference.config import Target, target_api
from kinference.kvcache.source import PreciseCachedTokens
from kinference.requests import InferenceRequest
from kinference.routing.apis import LOCAL_PATHS, sent_shape
from kinference.routing.attempt import Attempt
from kinference.routing.blocks import PrefixHasher
from kinference.routing.decision import Decision, LocalChoice, Outcome
from kinference.routing.filters.saturation import SaturationFilter
from kinference.routing.learning import Learning
from kinference.routing.plugins.base import PickContext, Unsettled
from kinference.routing.plugins.cached import PRECISE, CachedTokenSources, PrefixQuery
from kinference.routing.plugins.pipeline import SATURATED
from kinference.routing.policy import RoutingPolicy
from kinference.routing.prefix import PrefixIndex
from kinference.routing.reasons import Reason
from kinference.routing.settle import settle
from kinference.routing.table import IndexArray, WorkerTable


class WorkerChoice:
    """The local pick of a Pick (the state it reads is `Router`'s)."""

    policy: RoutingPolicy
    table: WorkerTable
    prefix: PrefixIndex
    hasher: PrefixHasher
    learning: Learning
    sources: CachedTokenSources
    _precise: PreciseCachedTokens | None
    _rng: random.Random

    def _local(
        self, attempt: Attempt, group: tuple[Target, ...], slots: IndexArray,
        context: tuple[PickContext, str | None] | None = None,
        pool_slots: IndexArray | None = None,
    ) -> Decision:  # fmt: skip
        """The choice among `slots`; `context`: their `_context`, when already made;
        `pool_slots`: the ready workers the filters narrowed to `slots` (None: the same)."""
        decision = self._local_unless(attempt, group, slots, context, None, pool_slots=pool_slots)
        return cast(Decision, decision)  # (no guard: always a decision)

    def _local_unless(
        self, attempt: Attempt, group: tuple[Target, ...], slots: IndexArray,
        context: tuple[PickContext, str | None] | None, guard: SaturationFilter | None,
        *, pool_slots: IndexArray | None = None,
    ) -> Decision | None:  # fmt: skip
        """`_local`, or None where `guard` finds a candidate saturated (`Pipeline.choose`;
        given only where the pipeline runs: `policy.predicts_ttft`)."""
        request, policy, model = attempt.query.request, self.policy, group[0].model
        ctx, note = (
            context
            if context is not None
            else self._context(attempt, group, slots, pool_slots, lazy=True)
        )
        unsettled = ctx.unsettled
        if len(slots) > 1 or policy.predicts_ttft:
            asked = settle(policy.pipeline, ctx, guard)
            index = policy.pipeline.choose(ctx, self._rng, guard, asked)
            if index == SATURATED:  # (the context goes on to the saturated path: exact)
                if unsettled is not None:
                    unsettled.complete(ctx.cached_tokens)
                return None
        else:
            index = 0
            if unsettled is not None:
                unsettled.complete(ctx.cached_tokens)
        slot = int(slots[index])
        predicted, waits = ctx.predicted_ttft_ms, ctx.predicted_wait_ms
        held, age = self.prefix.held(slot, ctx.hashes)
        choice = LocalChoice(
            self.table.endpoints[slot], slot, self.policy.catalog.pool_of(group, slot), model,
            prompt_tokens=ctx.prompt_tokens, cached_tokens=float(ctx.cached_tokens[index]),
            predicted_ttft_ms=None if predicted is None else float(predicted[index]),
            predicted_wait_ms=0.0 if waits is None else float(waits[index]), hashes=ctx.hashes,
            sequences=1.0 + (0.0 if ctx.sequences is None else float(ctx.sequences[index])),
            ended_before=self.table.ended.item(slot),
            probe=ctx.probes is not None and bool(ctx.probes[index]),
            held_blocks=held, held_age=age,
            settled=not self.table.shared_pending(slot, ctx.hashes),
            predicted_cached_tokens=(
                int(ctx.cached_tokens[index]) if attempt.query.precise is not None
                and self.policy.catalog.prefix_mode(ctx.pool) == PRECISE else None
            ),
            text_chars=request.prompt.text_chars if request.prompt.complete else 0,
            fixed_tokens=request.prompt.fixed_tokens,
        )  # fmt: skip
        outcome, reason, code = _degraded(request, note)
        shape = sent_shape(request.shape, target_api(group[0], None))
        translated = shape if shape is not None and shape is not request.shape else None
        return Decision(
            outcome,
            local=choice,
            reason=reason,
            code=code,
            canonical_model=attempt.route.name,
            max_tokens_field=group[0].max_tokens_field,
            sent_shape=translated,
            local_path=LOCAL_PATHS[translated] if translated is not None else "",
        )

    def _context(
        self, attempt: Attempt, group: tuple[Target, ...], slots: IndexArray,
        pool_slots: IndexArray | None = None, *, lazy: bool = False,
    ) -> tuple[PickContext, str | None]:  # fmt: skip
        """The Pick's context: the prompt's blocks and each candidate's cached tokens; and
        why a precise pool fell back to the approximate index, if it did. `lazy`: for
        `_local_unless` (which settles them): a precise pool's cached tokens may be upper
        bounds where they cost a replay (`PickContext.unsettled`)."""
        request, settings, model = attempt.query.request, self.policy.prefix, group[0].model
        hashes = self.hasher.hashes(
            model, request.prompt.segments,
            block_bytes=settings.block_bytes, max_blocks=settings.max_blocks,
        )  # fmt: skip
        pool = group[0].pool or ""
        precise = attempt.query.precise
        counted = precise.prompt_tokens(pool) if precise is not None else None
        chars_per_token = self.learning.text.chars_per_token(model)
        prompt_tokens = (
            request.prompt.tokens_at(chars_per_token, request.token_estimate)
            if counted is None else float(counted)
        )  # fmt: skip
        query = PrefixQuery(
            request, model, pool, hashes, settings.block_bytes, prompt_tokens,
            truncated=len(hashes) >= settings.max_blocks, precise=attempt.query.precise,
            chars_per_token=chars_per_token,
        )  # fmt: skip
        mode, note = self.policy.catalog.prefix_mode(pool), None
        ahead: list[float] | None = None
        batch: list[float] | None = None
        unsettled: Unsettled | None = None
        if mode == PRECISE and self._precise is not None:
            cached, note, rooms, unsettled = self._precise.match_lazily(query, slots, lazy=lazy)
            if any(room.ahead for room in rooms):
                ahead = [float(room.ahead) for room in rooms]
                batch = [float(room.batch) for room in rooms]
        else:
            cached = self.sources.get(mode).cached_tokens(query, slots)
        ctx = PickContext(
            request, model, pool, self.table, attempt.signals, slots, prompt_tokens, cached,
            hashes, pool_slots, footprint=self.prefix.footprint(slots), memory_ahead=ahead,
            memory_batch=batch, unsettled=unsettled,
        )  # fmt: skip
        return ctx, note

    def _narrowed(
        self, context: tuple[PickContext, str | None], slots: IndexArray, kept: list[int]
    ) -> tuple[IndexArray, tuple[PickContext, str | None] | None]:
        """The candidates of `slots` at the positions `kept` (in order), and `context` of
        them, as `_context` would make it for them; None (make it afresh) in a precise
        pool, whose note may name a candidate left out."""
        if len(kept) == len(slots):
            return slots, context
        ctx, note = context
        if self.policy.catalog.prefix_mode(ctx.pool) == PRECISE:
            return slots.take(kept), None
        narrowed = ctx.narrowed(kept)
        return narrowed.slots, (narrowed, note)


def _degraded(request: InferenceRequest, precise_note: str | None) -> tuple[Outcome, str, Reason]:
    """OK, or DEGRADED with why: part of the prompt unhashed, a precise pool's fallback."""
    if not request.prompt.complete:
        reason = f"no full prefix-cache signal: {request.prompt.reason}"
        if precise_note:
            reason = f"{reason}; {precise_note}"
        return Outcome.DEGRADED, reason, Reason.PARTIAL_PROMPT
    if precise_note:
        return Outcome.DEGRADED, precise_note, Reason.PRECISE_FALLBACK
    return Outcome.OK, "", Reason.NONE

"""The routing pipeline: tenant rules, model targets, readiness, saturation and QoS, scoring.

1. The requested model resolves to a route (aliases, implicit pool models); unknown models
   get NO_WORKERS. 2. Tenant rules may reject (POLICY_REJECTED). 3. Primary targets whose
   `when` conditions hold are tried in order: a pool target takes the request when it has a
   ready worker below the saturation thresholds, a provider target when it is not cooling
   down and speaks the request's shape. 4. When the primary pools are all saturated, QoS
   decides: DEFERRABLE is shed, BATCH is shed once the pool is overloaded (else it joins the
   least busy saturated worker), INTERACTIVE overflows to an overflow target or else takes
   the best saturated worker (never shed). 5. With nothing ready at all, overflow targets are
   tried for every class. 6. Otherwise NO_WORKERS, naming why each target could not serve.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kinference.config import ModelRoute, Target, UnsupportedShape, provider_path
from kinference.kvcache.precise import PreciseCaches, PreciseMatch, fuse
from kinference.requests import InferenceRequest, Shape
from kinference.routing.decision import (
    Decision,
    LocalChoice,
    Outcome,
    ProviderChoice,
    QoS,
    RouteQuery,
)
from kinference.routing.features import Signals
from kinference.routing.health import ProviderHealth
from kinference.routing.policy import RoutingPolicy
from kinference.routing.prefix import PrefixHasher, PrefixIndex
from kinference.routing.saturation import OVERLOADED, SATURATED
from kinference.routing.scoring import choose
from kinference.routing.table import IndexArray, WorkerTable
from kinference.routing.tenants import TenantGate

# Provider APIs are OpenAI-style; an Anthropic messages body has no provider path here.
_SHAPE_KINDS = {
    Shape.CHAT: "chat",
    Shape.COMPLETION: "completion",
    Shape.EMBEDDINGS: "embeddings",
    Shape.RESPONSES: "responses",
}


@dataclass
class _Busy:
    """The first primary pool found ready but saturated, kept for the QoS fallback."""

    group: tuple[Target, ...]
    slots: IndexArray
    levels: npt.NDArray[np.int8]


@dataclass
class _Attempt:
    query: RouteQuery
    route: ModelRoute
    signals: Signals
    notes: list[str] = field(default_factory=list)
    busy: list[_Busy] = field(default_factory=list)  # primary pools ready but saturated

    def groups(self, targets: tuple[Target, ...]) -> list[tuple[Target, ...]]:
        """Targets whose conditions hold, in order, each tried alone; a model that pools
        serve without a `models:` entry has all its pools tried as one candidate set."""
        request = self.query.request
        usable = tuple(
            t
            for t in targets
            if t.when.matches(request.token_estimate, request.has_tools, request.hint)
        )
        if self.route.implicit and usable:
            return [usable]
        return [(t,) for t in usable]


class Router:
    """Decides per Pick from the policy in force and the shared state it is given."""

    def __init__(
        self,
        policy: RoutingPolicy,
        *,
        table: WorkerTable,
        prefix: PrefixIndex,
        health: ProviderHealth,
        tenants: TenantGate,
        rng: random.Random,
        clock: Callable[[], float] = time.monotonic,
        precise: PreciseCaches | None = None,
    ) -> None:
        self.policy = policy
        self.precise = precise  # engines' own KV events, for pools in precise prefix mode
        self.table = table
        self.prefix = prefix
        self.health = health
        self.tenants = tenants
        self._rng = rng
        self._clock = clock  # the engine scraper's clock: readings are aged against it
        self.hasher = PrefixHasher()
        self._unknown: Signals | None = None

    def route(self, query: RouteQuery) -> Decision:
        policy, request = self.policy, query.request
        route = policy.config.resolve_model(request.model)
        if route is None:
            reason = f"no pool or provider serves model {request.model!r}"
            return Decision(Outcome.NO_WORKERS, reason=reason)
        if query.pool is not None and not policy.catalog.has_pool(query.pool):
            return Decision(Outcome.NO_WORKERS, reason=f"pool {query.pool} is not known")
        names = (request.model, *route.names)
        rejected = self.tenants.check(policy.config, query.tenant, names, query.qos.value)
        if rejected is not None:
            return Decision(Outcome.POLICY_REJECTED, reason=rejected)
        stale_after = policy.engine_stale_after_s
        attempt = _Attempt(query, route, self._signals(stale_after))
        decision = self._first(attempt, attempt.groups(route.primary))
        return decision if decision is not None else self._after_primaries(attempt)

    def _signals(self, stale_after_s: float) -> Signals:
        if self.table.has_readings():
            waiting, kv_usage = self.table.engine_signals(self._clock(), stale_after_s)
            return Signals(waiting, kv_usage, queued=self.table.queue_now(waiting))
        unknown = self._unknown  # no engine scraped: the same all-unknown arrays every Pick
        if unknown is None or len(unknown.waiting) != len(self.table.inflight):
            waiting, kv_usage = self.table.engine_signals(0.0, 0.0)
            unknown = self._unknown = Signals(waiting, kv_usage, known=False)
        return unknown

    def _after_primaries(self, attempt: _Attempt) -> Decision:
        overflow = attempt.groups(attempt.route.overflow)
        if attempt.busy:
            # Overflow pools are our own spare capacity: every class may use them before
            # QoS sheds anything. Overflow providers cost money: INTERACTIVE only.
            pools = [group for group in overflow if group[0].pool is not None]
            decision = self._first(attempt, pools)
            if decision is not None:
                return decision
            if attempt.query.qos is not QoS.INTERACTIVE:
                return self._batch_or_shed(attempt)
            overflow = [group for group in overflow if group[0].pool is None]
        decision = self._first(attempt, overflow)
        if decision is not None:
            return decision
        if attempt.busy and attempt.query.qos is not QoS.INTERACTIVE:
            return self._batch_or_shed(attempt)  # only an overflow pool was ready, and busy
        if attempt.busy:  # INTERACTIVE is never shed: the least busy of the busy pools
            busy = self._least_busy(attempt) or attempt.busy[0]
            return self._local(attempt, busy.group, busy.slots)
        reason = "; ".join(attempt.notes) or f"no target of {attempt.route.name!r} matches"
        return Decision(Outcome.NO_WORKERS, reason=reason, canonical_model=attempt.route.name)

    def _first(self, attempt: _Attempt, groups: list[tuple[Target, ...]]) -> Decision | None:
        for group in groups:
            decision = self._try(attempt, group)
            if decision is not None:
                return decision
        return None

    def _batch_or_shed(self, attempt: _Attempt) -> Decision:
        pools = ", ".join(_pools(busy.group) for busy in attempt.busy)
        if attempt.query.qos is QoS.DEFERRABLE:
            reason = f"pool {pools} is saturated: DEFERRABLE requests are shed first"
            return Decision(Outcome.POLICY_REJECTED, reason=reason)
        busy = self._least_busy(attempt)
        if busy is not None:
            return self._local(attempt, busy.group, busy.slots)
        reason = f"pool {pools} is saturated past the BATCH limit: BATCH requests are shed"
        return Decision(Outcome.POLICY_REJECTED, reason=reason)

    @staticmethod
    def _least_busy(attempt: _Attempt) -> _Busy | None:
        """The first busy pool's workers that are saturated but not overloaded, if any."""
        for busy in attempt.busy:
            usable = busy.levels < OVERLOADED
            if usable.any():
                return _Busy(busy.group, busy.slots[usable], busy.levels[usable])
        return None

    def _try(self, attempt: _Attempt, group: tuple[Target, ...]) -> Decision | None:
        first = group[0]
        if first.provider is not None:
            return self._try_provider(attempt, first, first.provider)
        return self._try_pool(attempt, group)

    def _try_provider(self, attempt: _Attempt, target: Target, ref: str) -> Decision | None:
        cooled = self.health.cooled(ref)
        if cooled is not None:
            left = cooled.remaining(self.health.now())
            attempt.notes.append(
                f"provider {ref} is cooling down ({cooled.reason}, {left:.0f}s left)"
            )
            return None
        path = self._provider_path(attempt.query.request, target, ref)
        if path is None:
            shape = attempt.query.request.shape.value
            attempt.notes.append(f"provider {ref} has no endpoint for {shape} requests")
            return None
        return Decision(
            Outcome.OK,
            provider=ProviderChoice(ref, path, target.model),
            canonical_model=attempt.route.name,
            max_tokens_field=target.max_tokens_field,
        )

    def _provider_path(self, request: InferenceRequest, target: Target, ref: str) -> str | None:
        provider = self.policy.config.provider(ref)
        kind = _SHAPE_KINDS.get(request.shape)
        if provider is None or kind is None:
            return target.path
        try:
            return provider_path(provider, target, kind)
        except UnsupportedShape:
            return None

    def _try_pool(self, attempt: _Attempt, group: tuple[Target, ...]) -> Decision | None:
        slots = self._ready_slots(attempt, group)
        if slots is None:
            return None
        signals = attempt.signals
        if not signals.known:  # no engine metrics anywhere: every ready worker is free
            return self._local(attempt, group, slots)
        levels = self.policy.saturation.levels(signals.queue[slots], signals.kv_usage[slots])
        free = slots[levels < SATURATED]
        if len(free):
            return self._local(attempt, group, free)
        attempt.notes.append(f"pool {_pools(group)} is saturated")
        attempt.busy.append(_Busy(group, slots, levels))
        return None

    def _ready_slots(self, attempt: _Attempt, group: tuple[Target, ...]) -> IndexArray | None:
        """Ready workers of the group's pools (only the named pool, when one is named)."""
        named, catalog = attempt.query.pool, self.policy.catalog
        found = [
            slots
            for target in group
            if target.pool is not None and (named is None or target.pool == named)
            if (slots := catalog.slots(target.pool, target.model)) is not None
        ]
        if not found:
            where = f"the named pool {named}" if named else f"pool {_pools(group)}"
            attempt.notes.append(f"{where} does not serve {group[0].model!r}")
            return None
        slots = found[0] if len(found) == 1 else np.unique(np.concatenate(found))
        slots = slots[self.table.ready[slots]]
        if not len(slots):
            attempt.notes.append(f"pool {_pools(group)} has no ready endpoint")
            return None
        return slots

    def _local(self, attempt: _Attempt, group: tuple[Target, ...], slots: IndexArray) -> Decision:
        request, settings, model = attempt.query.request, self.policy.prefix, group[0].model
        hashes = self.hasher.hashes(
            model,
            request.prompt.segments,
            block_bytes=settings.block_bytes,
            max_blocks=settings.max_blocks,
        )
        matched = np.zeros(len(self.table.inflight))
        for slot, blocks in self.prefix.match(hashes).items():
            matched[slot] = blocks
        prefix_blocks, total, precise_note = matched[slots], len(hashes), None
        precise = self._precise(attempt, group, slots)
        if precise is not None:
            match, total = precise
            prefix_blocks = fuse(match, prefix_blocks, len(hashes), total)
            precise_note = match.degraded()
        scored = choose(
            self.table,
            slots,
            model=model,
            signals=attempt.signals,
            prefix_blocks=prefix_blocks,
            total_blocks=total,
            weights=self.policy.weights,
            balance=self.policy.balance,
            rng=self._rng,
        )
        slot = int(slots[scored.index])
        endpoint = self.table.endpoints[slot]
        pool = self._pool_of(group, slot)
        predicted = None
        if precise is not None and precise[0].trusted[scored.index]:
            prompt = attempt.query.precise.blocks[pool] if attempt.query.precise else None
            # An engine always computes the prompt's last token: a fully cached prompt
            # counts one token short, i.e. its last full block is not a hit.
            usable = (prompt.tokens - 1) // prompt.block_size if prompt else 0
            predicted = min(scored.prefix_blocks, usable) * prompt.block_size if prompt else None
        choice = LocalChoice(endpoint, slot, pool, model, scored.prefix_blocks, total, predicted)
        outcome, reason = Outcome.OK, ""
        if not request.prompt.complete:
            outcome = Outcome.DEGRADED
            reason = f"no full prefix-cache signal: {request.prompt.reason}"
        note = precise_note or self._precise_problem(attempt, group)
        if note is not None:
            outcome, reason = Outcome.DEGRADED, f"{reason}; {note}" if reason else note
        return Decision(
            outcome,
            local=choice,
            reason=reason,
            canonical_model=attempt.route.name,
            max_tokens_field=group[0].max_tokens_field,
            prefix_hashes=hashes,
        )

    def _precise(
        self, attempt: _Attempt, group: tuple[Target, ...], slots: IndexArray
    ) -> tuple[PreciseMatch, int] | None:
        """The precise match of a one-pool group in precise mode, and the prompt's blocks."""
        query = attempt.query.precise
        if self.precise is None or query is None or len(group) != 1 or group[0].pool is None:
            return None
        prompt = query.blocks.get(group[0].pool)
        if prompt is None or not prompt.blocks:
            return None
        match = self.precise.match(group[0].pool, prompt, slots.tolist())
        return None if match is None else (match, len(prompt.blocks))

    def _precise_problem(self, attempt: _Attempt, group: tuple[Target, ...]) -> str | None:
        """Why a precise pool's Pick could not use the prompt's tokens, if it could not."""
        query, ref = attempt.query.precise, group[0].pool
        if query is None or query.problem is None or self.precise is None or ref is None:
            return None
        return query.problem if self.precise.pool(ref) is not None else None

    def _pool_of(self, group: tuple[Target, ...], slot: int) -> str:
        if len(group) == 1:
            return group[0].pool or ""
        for target in group:
            slots = self.policy.catalog.slots(target.pool or "", target.model)
            if slots is not None and slot in slots:
                return target.pool or ""
        return group[0].pool or ""


def _pools(group: tuple[Target, ...]) -> str:
    return ", ".join(str(target.pool) for target in group)

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

import numpy as np

from kinference.config import Policy, Target, target_api
from kinference.kvcache.precise import PreciseCaches
from kinference.kvcache.source import PreciseCachedTokens
from kinference.routing.apis import sent_shape
from kinference.routing.attempt import Attempt, Busy
from kinference.routing.blocks import PrefixHasher
from kinference.routing.decision import (
    Decision,
    Outcome,
    ProviderChoice,
    QoS,
    RouteQuery,
)
from kinference.routing.features import Signals
from kinference.routing.feedback import RouterFeedback
from kinference.routing.filters.provider_health import ProviderHealthFilter, provider_path_for
from kinference.routing.filters.ready import ReadyFilter
from kinference.routing.filters.saturation import free_positions
from kinference.routing.filters.tenant import TenantFilter
from kinference.routing.health import ProviderHealth
from kinference.routing.journal import Journal, NullJournal
from kinference.routing.learning import Learning
from kinference.routing.plugins.base import PickContext
from kinference.routing.plugins.cached import (
    PRECISE,
    ApproximateCachedTokens,
    CachedTokenSources,
)
from kinference.routing.plugins.pipeline import PluginCosts
from kinference.routing.policy import RoutingPolicy, compile_policy
from kinference.routing.prefix import PrefixIndex
from kinference.routing.reasons import Reason
from kinference.routing.table import IndexArray, WorkerTable
from kinference.routing.tenants import TenantGate
from kinference.routing.worker_choice import WorkerChoice


class Router(RouterFeedback, WorkerChoice):
    """Decides per Pick from the policy in force and the shared state it owns: the worker
    table, the prefix index, provider health, tenant admission and the learned rates.
    Everything that changes that state (policy reloads, reports, engine readings, other
    replicas' events) goes through its methods (the reports' and readings' are
    `RouterFeedback`'s, the choice of a pool's worker `WorkerChoice`'s)."""

    def __init__(
        self,
        policy: Policy,
        *,
        table: WorkerTable,
        prefix: PrefixIndex,
        health: ProviderHealth,
        tenants: TenantGate,
        rng: random.Random,
        clock: Callable[[], float] = time.monotonic,
        journal: Journal | None = None,
        sources: CachedTokenSources | None = None,
        precise: PreciseCaches | None = None,
    ) -> None:
        """`precise`: the engines' own KV-cache state, for pools in precise prefix mode."""
        self.table = table
        self.prefix = prefix
        self.health = health
        self.tenants = tenants
        self.costs = PluginCosts()
        self.journal: Journal = NullJournal() if journal is None else journal
        self.learning = Learning(table, prefix, self.journal)
        self.policy: RoutingPolicy = compile_policy(policy, table, self.learning.rates, self.costs)
        self.learning.block_bytes = self.policy.prefix.block_bytes
        health.policy = self.policy.cooldowns
        prefix.blocks_per_worker = policy.routing.prefix.lru_blocks_per_worker
        self.precise = precise  # engines' own KV events, for pools in precise prefix mode
        approximate = ApproximateCachedTokens(prefix)
        self._precise = None if precise is None else PreciseCachedTokens(precise, approximate)
        extra = {} if self._precise is None else {PRECISE: self._precise}
        self.sources = sources or CachedTokenSources(approximate, extra)
        self._tenant_filter = TenantFilter(tenants)
        self._provider_filter = ProviderHealthFilter(health)
        self._ready = ReadyFilter()
        self._rng = rng
        self._clock = clock  # the engine scraper's clock: readings are aged against it
        self.hasher = PrefixHasher()
        self._unknown: Signals | None = None

    def reload(self, policy: Policy) -> None:
        """Switch to a reloaded policy; learned state (load, prefixes, rates, health) carries
        over, except for endpoints that left every pool (their cache is not ours to count)."""
        self.prefix.flush()  # a waiting record trims to the bound it was made under
        routing = compile_policy(policy, self.table, self.learning.rates, self.costs)
        for gone in self.policy.catalog.endpoints() - routing.catalog.endpoints():
            self.learning.forget(self.table.slot(gone))
        self.policy = routing
        self.learning.block_bytes = routing.prefix.block_bytes
        self.health.policy = routing.cooldowns
        self.prefix.blocks_per_worker = policy.routing.prefix.lru_blocks_per_worker

    def flush_prefix_records(self) -> None:
        """Apply what the last decisions left for after their answer (their prefix
        records: `PrefixIndex.record_later`); the picker calls it in the loop's next step."""
        self.prefix.flush()

    def now(self) -> float:
        """The router's monotonic clock (engine readings are aged against it)."""
        return self._clock()

    # -- the decision -------------------------------------------------------------------

    def route(self, query: RouteQuery) -> Decision:
        policy, request = self.policy, query.request
        route = policy.config.resolve_model(request.model)
        if route is None:
            reason = f"no pool or provider serves model {request.model!r}"
            return Decision(Outcome.NO_WORKERS, reason=reason, code=Reason.UNKNOWN_MODEL)
        if query.pool is not None and not policy.catalog.has_pool(query.pool):
            reason = f"pool {query.pool} is not known"
            return Decision(Outcome.NO_WORKERS, reason=reason, code=Reason.UNKNOWN_POOL)
        names = (request.model, *route.names)
        rejected = self._tenant_filter.admit(policy.config, query.tenant, names, query.qos.value)
        if rejected is not None:
            return Decision(
                Outcome.POLICY_REJECTED,
                reason=rejected.text,
                code=rejected.code,
                retry_after_s=rejected.retry_after_s,
            )
        stale_after = policy.engine_stale_after_s
        attempt = Attempt(query, route, self._signals(stale_after), self.learning.text)
        decision = self._first(attempt, attempt.groups(route.primary))
        return decision if decision is not None else self._after_primaries(attempt)

    def _signals(self, stale_after_s: float) -> Signals:
        if self.table.has_readings():
            waiting, kv_usage, queued = self.table.signals_now(self._clock(), stale_after_s)
            return Signals(waiting, kv_usage, queued=queued)
        unknown = self._unknown  # no engine scraped: the same all-unknown arrays every Pick
        if unknown is None or len(unknown.waiting) != len(self.table.inflight):
            waiting, kv_usage = self.table.engine_signals(0.0, 0.0)
            unknown = self._unknown = Signals(waiting, kv_usage, known=False)
        return unknown

    def _after_primaries(self, attempt: Attempt) -> Decision:
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
            busy = attempt.least_busy() or attempt.busy[0]
            return self._local(attempt, busy.group, busy.slots)
        return attempt.no_workers()

    def _first(self, attempt: Attempt, groups: list[tuple[Target, ...]]) -> Decision | None:
        for group in groups:
            decision = self._try(attempt, group)
            if decision is not None:
                return decision
        return None

    def _batch_or_shed(self, attempt: Attempt) -> Decision:
        pools = ", ".join(_pools(busy.group) for busy in attempt.busy)
        if attempt.query.qos is QoS.DEFERRABLE:
            reason = f"pool {pools} is saturated: DEFERRABLE requests are shed first"
            return Decision(Outcome.POLICY_REJECTED, reason=reason, code=Reason.SHED_SATURATED)
        busy = attempt.least_busy()
        if busy is not None:
            return self._local(attempt, busy.group, busy.slots)
        reason = f"pool {pools} is saturated past the BATCH limit: BATCH requests are shed"
        return Decision(Outcome.POLICY_REJECTED, reason=reason, code=Reason.SHED_SATURATED)

    def _try(self, attempt: Attempt, group: tuple[Target, ...]) -> Decision | None:
        first = group[0]
        if first.provider is not None:
            return self._try_provider(attempt, first, first.provider)
        return self._try_pool(attempt, group)

    def _try_provider(self, attempt: Attempt, target: Target, ref: str) -> Decision | None:
        cooling = self._provider_filter.check(ref)
        if cooling is not None:
            attempt.note(cooling.code, cooling.text)
            cooled = self.health.cooled(ref)
            if cooled is not None:
                attempt.cooling_for(cooled.remaining(self.health.now()))
            return None
        request = attempt.query.request
        shape = sent_shape(request.shape, target_api(target, self.policy.config.provider(ref)))
        path = None if shape is None else provider_path_for(self.policy.config, shape, target, ref)
        if shape is None or path is None:
            what = request.shape.value
            attempt.note(Reason.NO_TARGET, f"provider {ref} has no endpoint for {what} requests")
            return None
        return Decision(
            Outcome.OK,
            provider=ProviderChoice(ref, path, target.model),
            canonical_model=attempt.route.name,
            max_tokens_field=target.max_tokens_field,
            sent_shape=shape if shape is not request.shape else None,
        )

    def _try_pool(self, attempt: Attempt, group: tuple[Target, ...]) -> Decision | None:
        if sent_shape(attempt.query.request.shape, target_api(group[0], None)) is None:
            what = attempt.query.request.shape.value
            attempt.note(Reason.NO_TARGET, f"pool {_pools(group)} takes no {what} requests")
            return None
        slots = self._ready_slots(attempt, group)
        if slots is None:
            return None
        signals, saturation = attempt.signals, self.policy.saturation
        # (no engine metrics anywhere: every ready worker is free)
        if not signals.known:
            return self._local(attempt, group, slots)
        decision, context = self._unless_saturated(attempt, group, slots)
        if decision is not None:
            return decision
        assert context is not None  # (made whenever no decision is)
        # Some are saturated; the request's own cache hit adds no KV use where it is cached.
        # The context made for that is the choice's too (`narrowed` to the free ones).
        levels = saturation.levels_with_hits_in(signals, slots, context[0])
        free = free_positions(levels)
        if free:
            kept, narrowed = self._narrowed(context, slots, free)
            return self._local(attempt, group, kept, narrowed, pool_slots=slots)
        attempt.note(Reason.SATURATED, f"pool {_pools(group)} is saturated")
        attempt.busy.append(Busy(group, slots, np.asarray(levels, dtype=np.int8)))
        return None

    def _unless_saturated(
        self, attempt: Attempt, group: tuple[Target, ...], slots: IndexArray
    ) -> tuple[Decision | None, tuple[PickContext, str | None] | None]:
        """The choice among `slots` where none is saturated by the Pick's engine signals
        (and the context made for it, if one was); else None, and the Pick's context
        (`_context`) for the saturated path."""
        policy, saturation = self.policy, self.policy.saturation
        if policy.predicts_ttft and policy.pipeline.fuses(len(slots)):
            # A small pool: the saturation check (the request's own cache hits counted),
            # the scores and the choice in one C call. (The same answer as the check
            # below and then the choice: a level counting hits is never above the level
            # without them, and where one is, `levels_with_hits_in` decides as it does.)
            context = self._context(attempt, group, slots)
            return self._local_unless(attempt, group, slots, context, saturation), context
        if not saturation.any_saturated_in(attempt.signals, slots):
            return self._local(attempt, group, slots), None
        return None, self._context(attempt, group, slots)

    def _ready_slots(self, attempt: Attempt, group: tuple[Target, ...]) -> IndexArray | None:
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
            attempt.note(Reason.NO_TARGET, f"{where} does not serve {group[0].model!r}")
            return None
        slots = found[0] if len(found) == 1 else _union(found)
        slots = self._ready.filter_slots(self.table, slots)
        if not len(slots):
            attempt.note(Reason.NO_READY_ENDPOINT, f"pool {_pools(group)} has no ready endpoint")
            return None
        return slots


def _union(found: list[IndexArray]) -> IndexArray:
    """Slots of several pools, sorted, each once. Not `np.unique`: its first call imports
    numpy.ma (11 ms idle, ~80 ms seen under load), on the loop, in the Pick that made it."""
    merged = np.sort(np.concatenate(found))
    return merged[np.concatenate(([True], merged[1:] != merged[:-1]))]


def _pools(group: tuple[Target, ...]) -> str:
    return ", ".join(str(target.pool) for target in group)

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

from kinference.config import Policy, Target, target_api
from kinference.kvcache.precise import PreciseCaches
from kinference.kvcache.source import PreciseCachedTokens
from kinference.routing.apis import sent_shape
from kinference.routing.attempt import Attempt
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
from kinference.routing.filters.tenant import TenantFilter
from kinference.routing.health import ProviderHealth
from kinference.routing.journal import Journal, NullJournal
from kinference.routing.learning import Learning
from kinference.routing.plugins.cached import (
    PRECISE,
    ApproximateCachedTokens,
    CachedTokenSources,
)
from kinference.routing.plugins.pipeline import PluginCosts
from kinference.routing.policy import RoutingPolicy, compile_policy
from kinference.routing.pool_target import PoolTarget, pools_of
from kinference.routing.prefix import PrefixIndex
from kinference.routing.reasons import Reason
from kinference.routing.table import WorkerTable
from kinference.routing.tenants import TenantGate


class Router(RouterFeedback, PoolTarget):
    """Decides per Pick from the policy in force and the shared state it owns: the worker
    table, the prefix index, provider health, tenant admission and the learned rates.
    Everything that changes that state (policy reloads, reports, engine readings, other
    replicas' events) goes through its methods (the reports' and readings' are
    `RouterFeedback`'s, a pool target's try `PoolTarget`'s and the choice of its worker
    `WorkerChoice`'s)."""

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
        self._free_gone(policy)  # before the new endpoints take slots: they reuse these
        routing = compile_policy(policy, self.table, self.learning.rates, self.costs)
        for gone in self.policy.catalog.endpoints() - routing.catalog.endpoints():
            slot = self.table.find(gone)
            if slot is not None:  # still draining: its slot stays until it is idle
                self.learning.forget(slot)
        self.policy = routing
        self.learning.block_bytes = routing.prefix.block_bytes
        self.health.policy = routing.cooldowns
        self.prefix.blocks_per_worker = policy.routing.prefix.lru_blocks_per_worker

    def _free_gone(self, policy: Policy) -> None:
        """Free the slots of workers in no pool of `policy` with nothing counting on them
        (`WorkerTable.idle`): a pool whose pods are replaced keeps a bounded table. What
        was learned of them goes with them; those still draining are freed at a later
        reload."""
        staying = {endpoint for pool in policy.pools for endpoint in pool.endpoints}
        table = self.table
        for slot, endpoint in enumerate(table.endpoints):
            if endpoint and endpoint not in staying and table.idle(slot):
                self.learning.forget(slot)
                table.free(slot)

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
        pools = ", ".join(pools_of(busy.group) for busy in attempt.busy)
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

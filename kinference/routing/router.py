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
from collections.abc import Callable, Sequence

import numpy as np

from kinference.config import Policy, Target, target_api
from kinference.kvcache.precise import PreciseCaches
from kinference.kvcache.source import PreciseCachedTokens
from kinference.requests import InferenceRequest
from kinference.routing.apis import LOCAL_PATHS, sent_shape
from kinference.routing.attempt import Attempt, Busy
from kinference.routing.decision import (
    Decision,
    LocalChoice,
    Outcome,
    ProviderChoice,
    QoS,
    RouteQuery,
)
from kinference.routing.features import EngineReading, Signals
from kinference.routing.filters.provider_health import ProviderHealthFilter, provider_path_for
from kinference.routing.filters.ready import ReadyFilter
from kinference.routing.filters.saturation import SATURATED
from kinference.routing.filters.tenant import TenantFilter
from kinference.routing.health import ProviderHealth
from kinference.routing.journal import Journal, NullJournal
from kinference.routing.learning import Learning, Served
from kinference.routing.pending import PendingPrefix
from kinference.routing.plugins.base import PickContext
from kinference.routing.plugins.cached import (
    PRECISE,
    ApproximateCachedTokens,
    CachedTokenSources,
    PrefixQuery,
)
from kinference.routing.plugins.pipeline import PluginCosts
from kinference.routing.policy import RoutingPolicy, compile_policy
from kinference.routing.prefix import PrefixHasher, PrefixIndex
from kinference.routing.reasons import Reason
from kinference.routing.table import IndexArray, WorkerTable
from kinference.routing.tenants import TenantGate


class Router:
    """Decides per Pick from the policy in force and the shared state it owns: the worker
    table, the prefix index, provider health, tenant admission and the learned rates.
    Everything that changes that state (policy reloads, reports, engine readings, other
    replicas' events) goes through its methods."""

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
        routing = compile_policy(policy, self.table, self.learning.rates, self.costs)
        for gone in self.policy.catalog.endpoints() - routing.catalog.endpoints():
            self.learning.forget(self.table.slot(gone))
        self.policy = routing
        self.learning.block_bytes = routing.prefix.block_bytes
        self.health.policy = routing.cooldowns
        self.prefix.blocks_per_worker = policy.routing.prefix.lru_blocks_per_worker

    def now(self) -> float:
        """The router's monotonic clock (engine readings are aged against it)."""
        return self._clock()

    # -- feedback: the only ways routing state changes --------------------------------

    def picked(self, choice: LocalChoice) -> None:
        """The service dispatched `choice` (its load is counted by InFlight)."""
        self.learning.picked(choice)

    def first_token(self, choice: LocalChoice, ttft_ms: float) -> None:
        self.learning.first_token(choice, ttft_ms)

    def first_token_failed(self, choice: LocalChoice) -> None:
        """The first report carried an upstream error: no prefill is pending any more."""
        self.learning.released_before_first_token(choice)

    def final(self, choice: LocalChoice, served: Served) -> None:
        self.learning.final(choice, served)

    def engine_reading(self, endpoint: str, ready: bool, reading: EngineReading | None) -> None:
        """An engine's readiness and metrics (None: unknown), from a scrape here or the
        scrape leader's reading in a cluster."""
        slot = self.table.slot(endpoint)
        self.table.set_ready(slot, ready)
        if reading is None:
            self.table.set_engine(slot, waiting=None, running=None, kv_usage=None)
            return
        self.table.set_engine(
            slot,
            waiting=reading.waiting,
            running=reading.running,
            kv_usage=reading.kv_usage,
            adapters=reading.adapters,
            scraped_at=reading.scraped_at,
        )

    def remote_picked(self, endpoint: str, hashes: Sequence[int]) -> None:
        """Another replica sent a request with these prefix blocks to `endpoint`."""
        if hashes:
            self.prefix.record(self.table.slot(endpoint), hashes)

    def remote_prefilling(
        self, instance: str, endpoint: str, pick: int, entry: PendingPrefix
    ) -> None:
        """Another replica's pick on `endpoint` prefills there until `remote_prefilled`."""
        slot = self.table.slot(endpoint)
        self.learning.remote_prefilling(instance, slot, pick, entry, self._clock())

    def remote_prefilled(self, instance: str, endpoint: str, pick: int) -> None:
        self.learning.remote_prefilled(instance, self.table.slot(endpoint), pick)

    def remote_gone(self, instance: str) -> None:
        """A replica left the cluster: what it had in progress no longer counts."""
        self.learning.remote_gone(instance)

    def remote_shortfall(
        self, endpoint: str, hashes: tuple[int, ...], kept: int, age: int | None
    ) -> None:
        """Another replica learned that `endpoint` evicted blocks of `hashes`."""
        self.prefix.shortfall(self.table.slot(endpoint), hashes, max(kept, 0), age)

    def remote_confirmed(self, endpoint: str, age: int | None) -> None:
        self.prefix.confirmed(self.table.slot(endpoint), age)

    def remote_load(self, endpoint: str, delta: int) -> None:
        """Another replica's requests in flight on `endpoint` changed by `delta`."""
        self.table.add_inflight(self.table.slot(endpoint), delta)

    def remote_first_token(self, endpoint: str, model: str, ttft_ms: float) -> None:
        self.table.observe_ttft(self.table.slot(endpoint), model, ttft_ms)

    def remote_itl(self, endpoint: str, model: str, counts: tuple[int, ...]) -> None:
        self.table.observe_itl(self.table.slot(endpoint), model, counts)

    def remote_served(
        self, endpoint: str, model: str, uncached: float, prefill_ms: float, service_ms: float
    ) -> None:
        self.learning.learn(self.table.slot(endpoint), model, uncached, prefill_ms, service_ms)

    def remote_text(self, endpoint: str, model: str, chars: float, tokens: float) -> None:
        """Another replica's sample of `model`'s characters per token (`endpoint` served
        it; the ratio is the model's, whoever serves it)."""
        self.learning.text.observe(model, chars, tokens)

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
            waiting, kv_usage = self.table.engine_signals(self._clock(), stale_after_s)
            return Signals(waiting, kv_usage, queued=self.table.queue_now(waiting))
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
        signals = attempt.signals
        if not signals.known:  # no engine metrics anywhere: every ready worker is free
            return self._local(attempt, group, slots)
        levels = self.policy.saturation.levels(signals.queue[slots], signals.kv_usage[slots])
        if levels.any():  # the request's own cache hit adds no KV use where it is cached
            ctx, _ = self._context(attempt, group, slots)
            levels = self.policy.saturation.levels_with_hits(
                signals.queue[slots], signals.kv_usage[slots], ctx.cached_tokens,
                ctx.prompt_tokens,
            )  # fmt: skip
        free = slots[levels < SATURATED]
        if len(free):
            return self._local(attempt, group, free)
        attempt.note(Reason.SATURATED, f"pool {_pools(group)} is saturated")
        attempt.busy.append(Busy(group, slots, levels))
        return None

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
        slots = found[0] if len(found) == 1 else np.unique(np.concatenate(found))
        slots = self._ready.filter_slots(self.table, slots)
        if not len(slots):
            attempt.note(Reason.NO_READY_ENDPOINT, f"pool {_pools(group)} has no ready endpoint")
            return None
        return slots

    def _local(self, attempt: Attempt, group: tuple[Target, ...], slots: IndexArray) -> Decision:
        request, policy, model = attempt.query.request, self.policy, group[0].model
        ctx, note = self._context(attempt, group, slots)
        if len(slots) > 1 or policy.predicts_ttft:
            index = policy.pipeline.choose(ctx, self._rng)
        else:
            index = 0
        slot = int(slots[index])
        predicted, waits = ctx.predicted_ttft_ms, ctx.predicted_wait_ms
        held, age = self.prefix.held(slot, ctx.hashes)
        choice = LocalChoice(
            self.table.endpoints[slot], slot, self.policy.catalog.pool_of(group, slot), model,
            prompt_tokens=ctx.prompt_tokens, cached_tokens=float(ctx.cached_tokens[index]),
            predicted_ttft_ms=None if predicted is None else float(predicted[index]),
            predicted_wait_ms=0.0 if waits is None else float(waits[index]), hashes=ctx.hashes,
            sequences=1.0 + (0.0 if ctx.sequences is None else float(ctx.sequences[index])),
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
        self, attempt: Attempt, group: tuple[Target, ...], slots: IndexArray
    ) -> tuple[PickContext, str | None]:
        """The Pick's context: the prompt's blocks and each candidate's cached tokens; and
        why a precise pool fell back to the approximate index, if it did."""
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
        if mode == PRECISE and self._precise is not None:
            cached, note = self._precise.match(query, slots)
        else:
            cached = self.sources.get(mode).cached_tokens(query, slots)
        ctx = PickContext(
            request, model, pool, self.table, attempt.signals, slots, prompt_tokens, cached,
            hashes, footprint=self.prefix.footprint(slots),
        )  # fmt: skip
        return ctx, note


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


def _pools(group: tuple[Target, ...]) -> str:
    return ", ".join(str(target.pool) for target in group)

"""The per-request flow over the body store and the routing core.

PushBody -> Pick -> PullBody -> reports, Abort and TTL: this module keeps the body store,
the in-flight table and the metrics consistent through every path a request can take. The
gRPC servicer calls it and converts; nothing here knows about gRPC.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TypeVar

from kinference.bodies import Body, BodyStore, Pull, Upload, new_id
from kinference.errors import InvalidArgument, NotFound
from kinference.itl_layout import BUCKETS as ITL_LAYOUT_1_BUCKETS
from kinference.kvcache.precise import PreciseQuery
from kinference.metrics import Metrics
from kinference.ops.recorder import RequestRecorder
from kinference.preparation import PickPreparation, Preparer
from kinference.requests import (
    InferenceRequest,
    RewritePlan,
    rewrite,
)
from kinference.requests.offload import Offload
from kinference.requests.rewrite import Translation
from kinference.requests.translation import Untranslatable
from kinference.routing import (
    Assignment,
    Decision,
    Destination,
    InFlight,
    LocalChoice,
    Outcome,
    ProviderChoice,
    Reason,
    RouteQuery,
    Router,
)
from kinference.routing.health import UNAUTHORIZED, UNRESOLVED
from kinference.routing.learning import Served
from kinference.routing.tenants import Reservation
from kinference.service_types import FinalReport, PickCall, PickResult

__all__ = ["FinalReport", "PickCall", "PickResult", "PickerService"]

log = logging.getLogger(__name__)
T = TypeVar("T")

# Abort reasons that tell the picker something about a provider it cannot see itself.
_LEARNED_LIMIT = 10_000  # aborted ids remembered so repeats do not count twice
_ABORT_HEALTH = {"BACKEND_UNRESOLVED": UNRESOLVED, "BACKEND_UNAUTHORIZED": UNAUTHORIZED}


class PickerService:
    """One instance's request flow; every path releases what it holds exactly once."""

    def __init__(
        self,
        store: BodyStore,
        router: Router,
        inflight: InFlight,
        metrics: Metrics,
        *,
        shared_gap: Callable[[], str | None] = lambda: None,
        recorder: RequestRecorder | None = None,
        offload: Offload | None = None,
        preparer: Preparer | None = None,
        preparation: PickPreparation | None = None,
    ) -> None:
        """`shared_gap` says why the cluster-wide view is incomplete now (Redis down or
        lagging, still bootstrapping), or None; such Picks answer DEGRADED. `recorder`
        counts and logs each request's steps (one on `metrics` by default). What a Pick
        waits for is `preparation`'s (else one over `offload` and `preparer`)."""
        self.store = store
        self.preparation = preparation or PickPreparation(
            store, lambda: router.policy.config, offload=offload, preparer=preparer
        )
        self.shared_gap = shared_gap
        self.router = router
        self.inflight = inflight
        self._metrics = metrics
        self._recorder = recorder or RequestRecorder(metrics)
        # Label lookups cost microseconds on every request: bind the children once.
        self._reports = {
            (kind, known): metrics.reports.labels(kind, str(known).lower())
            for kind in ("first_token", "final_token")
            for known in (True, False)
        }
        self._learned: OrderedDict[int, None] = OrderedDict()  # response ids already counted
        # Tenant budget reservations of requests in flight, settled or handed back with them.
        self._reservations: dict[int, Reservation] = {}

    @property
    def offload(self) -> Offload:
        """The parse worker (started and stopped by the composition root)."""
        return self.preparation.offload

    def begin_push(self, declared_length: int | None, client_request_id: str) -> Upload:
        return self.store.begin(declared_length, client_request_id)

    def commit_push(self, upload: Upload, request_path: str = "") -> tuple[int, int]:
        """Store a completely received body; returns (stream id, bytes received).
        `request_path` is the client's path when the caller sent it: a shape hint."""
        stream_id, body = self.store.commit(upload)
        body.request_path = request_path
        self.preparation.begin(stream_id, body)
        return stream_id, body.size

    def pick(self, call: PickCall) -> PickResult:
        """Decide where the body of `call.stream_id` goes; raises for protocol errors."""
        started = time.perf_counter()
        body = self.store.take(call.stream_id)
        self.preparation.cancel(call.stream_id)
        return self._decided(body, call, started, self.preparation.parse(body))

    async def pick_off_loop(self, call: PickCall) -> PickResult:
        """`pick`, with the parse of a body over INLINE_PARSE_BYTES run in the parse worker
        unless its upload's scan says it is cheap (`loop_cost`: an ordinary chat body of
        hundreds of KiB parses in a millisecond or two, where the pipe's round trip costs
        about as much), its translation too when one of its model's targets takes another
        API and it has large values (prepared before the decision, used if the decision
        translates), and, when precise pools may serve it, the prompt tokenized in the
        tokenizer thread (begun at push when it could be: `early`), and for a tenant whose
        cluster budget asked for a lease, its answer awaited (the decision itself,
        admission and reservation included, stays in one loop turn)."""
        started = time.perf_counter()
        body = self.store.take(call.stream_id)
        ready = await self.preparation.ready(call.stream_id, body)
        try:
            if not isinstance(ready.parsed, str):
                tenants = self.router.tenants
                await self._guarded(body, tenants.ready(self.router.policy.config, call.tenant))
            self.preparation.deciding(ready)  # the rest of this Pick is one loop step
            return self._decided(
                body,
                call,
                started,
                ready.parsed,
                precise=ready.precise,
                translated=ready.translated,
            )
        finally:
            if ready.held:
                self.store.budget.release(ready.held)

    async def _guarded(self, body: Body, step: Awaitable[T]) -> T:
        """`step`'s result; the body released if it raises or is cancelled."""
        try:
            return await step
        except BaseException:
            self.store.release(body)
            raise

    def _decided(
        self,
        body: Body,
        call: PickCall,
        started: float,
        parsed: InferenceRequest | str,
        *,
        precise: PreciseQuery | None = None,
        translated: Translation | Untranslatable | None = None,
    ) -> PickResult:
        try:
            result = self._decide(body, call, parsed, precise, translated)
        except BaseException:
            self.store.release(body)
            raise
        if result.response_id == 0:  # nothing will pull this body
            self.store.release(body)
        request_id = call.client_request_id or body.client_request_id
        self._recorder.picked(result, request_id, time.perf_counter() - started)
        return result

    def _decide(
        self,
        body: Body,
        call: PickCall,
        parsed: InferenceRequest | str,
        precise: PreciseQuery | None = None,
        translated: Translation | Untranslatable | None = None,
    ) -> PickResult:
        if isinstance(parsed, str):
            return PickResult(Outcome.BAD_REQUEST, reason=parsed, code=Reason.MALFORMED)
        request = parsed
        query = RouteQuery(request, call.pool, call.qos, call.tenant, precise)
        decision = self.router.route(query)
        local = decision.local
        if local is not None and precise is not None and self.router.precise is not None:
            blocks = precise.blocks.get(local.pool)
            if blocks is not None:
                cached = (local.predicted_cached_tokens or 0) // blocks.block_size
                self.router.precise.routed(
                    local.pool,
                    local.slot,
                    cached,
                    blocks,
                    key=id(local),
                    output_tokens=request.max_output_tokens or 0,
                )
        if not decision.dispatches:
            return PickResult(
                decision.outcome,
                reason=decision.reason,
                requested_model=request.model,
                code=decision.code,
                retry_after_s=decision.retry_after_s,
            )
        try:
            return self._dispatch(body, request, decision, call, translated)
        except Untranslatable as exc:
            if local is not None and self.router.precise is not None:
                self.router.precise.released(local)  # never sent: not in the engine's queue
            return PickResult(
                Outcome.BAD_REQUEST,
                reason=str(exc),
                requested_model=request.model,
                code=Reason.MALFORMED,
            )

    def _dispatch(
        self,
        body: Body,
        request: InferenceRequest,
        decision: Decision,
        call: PickCall,
        translated: Translation | Untranslatable | None = None,
    ) -> PickResult:
        destination: Destination | None = decision.local or decision.provider
        assert destination is not None
        plan = RewritePlan(
            model=decision.served_model,
            include_usage=request.stream,
            max_tokens_field=decision.max_tokens_field,
            sent_shape=decision.sent_shape,
        )
        rewritten = rewrite(body, request, plan, translated)  # before any state: may refuse
        response_id = new_id(_ResponseIdsInUse(self.inflight, self.store))
        request_id = call.client_request_id or body.client_request_id
        self.inflight.add(response_id, destination, call.tenant, decision.prefix_hashes, request_id)
        # Charged in the same loop turn as the admission check: no other Pick runs between.
        reservation = self.router.tenants.reserve(
            self.router.policy.config, call.tenant, request.token_estimate,
            request.max_output_tokens,
        )  # fmt: skip
        if reservation is not None:
            self._reservations[response_id] = reservation
        if decision.local is not None:
            self.router.picked(decision.local)
        self.store.park(response_id, rewritten)
        outcome, reason, code = decision.outcome, decision.reason, decision.code
        gap = self.shared_gap()
        if gap is not None:
            outcome, reason = Outcome.DEGRADED, f"{reason}; {gap}" if reason else gap
            code = Reason.SHARED_STATE if code is Reason.NONE else code
        sent = decision.sent_shape
        return PickResult(
            outcome,
            response_id=response_id,
            destination=destination,
            reason=reason,
            code=code,
            body_total_bytes=rewritten.size,
            requested_model=request.model,
            translated=(request.shape, sent) if sent is not None else None,
            local_path=decision.local_path,
            usage_asked=sent is not None and _usage_asked(request),
        )

    def open_pull(self, response_id: int) -> Pull:
        return self.store.open_pull(response_id)

    def close_pull(self, pull: Pull, *, completed: bool) -> None:
        """Release what a pull still holds; an abandoned pull frees its body at once."""
        pull.close()
        if not completed:
            self._metrics.bodies_reclaimed.labels("pull_abandoned").inc()

    def discard_push(self, upload: Upload) -> None:
        """Drop a push that failed or was reset: nothing of it stays."""
        self.store.discard(upload)

    def first_token(
        self, response_id: int, ttft_ms: int, upstream_status: int, *, ago_s: float = 0.0
    ) -> bool:
        """Record the first response byte (`ago_s` seconds ago: a report that came late,
        riding on the final one); False when the id is not in flight."""
        assignment = self.inflight.get(response_id)
        self._reports["first_token", assignment is not None].inc()
        if assignment is None:
            return False
        first = assignment.first_token_at is None  # a repeated report counts once
        if first:
            assignment.first_token_at = time.monotonic() - ago_s
        self._recorder.first_token(assignment, ttft_ms, upstream_status)
        destination = assignment.destination
        if isinstance(destination, LocalChoice):
            if upstream_status < 400 and first:
                assignment.ttft_ms = float(ttft_ms)
                self.router.first_token(destination, float(ttft_ms))
                if self.router.precise is not None:  # the engine ran it: events are due
                    self.router.precise.served(destination)
            elif first:  # no token came: its prefill is no longer pending either
                self.router.first_token_failed(destination)
        elif upstream_status >= 400:
            self.router.health.upstream_status(destination.ref, upstream_status)
        return True

    def final_token(self, report: FinalReport) -> bool:
        """Record a finished response, count its tokens, stop counting it as load."""
        _check_itl(report)
        assignment = self.inflight.release(report.response_id)
        self._reports["final_token", assignment is not None].inc()
        if assignment is None:
            return False
        self._recorder.final_token(report, assignment)
        self.router.tenants.settle(
            self._reservations.pop(report.response_id, None),
            report.prompt_tokens,
            report.completion_tokens,
        )
        local = assignment.local
        if local is not None:
            self.router.final(local, _served(report, assignment))
        if self.store.drop_parked(report.response_id):  # finished without pulling: odd
            self._metrics.bodies_reclaimed.labels("final_report").inc()
        return True

    def abort(self, response_id: int, reason: str, detail: str) -> None:
        """Release the body and the in-flight slot; NotFound when nothing was held.

        A provider the caller could not resolve or was refused by cools down even when the
        Abort comes after the request was released: the caller knows what we cannot see.
        """
        self._learn_from_abort(response_id, reason, detail)
        dropped_body = self.store.drop_parked(response_id)
        assignment = self.inflight.release(response_id)
        self._hand_back(response_id)
        if not dropped_body and assignment is None:
            raise NotFound(f"response {response_id} is unknown or already released")
        if dropped_body:
            self._metrics.bodies_reclaimed.labels("abort").inc()
        self._recorder.aborted(response_id, reason, detail, assignment)

    def _learn_from_abort(self, response_id: int, reason: str, detail: str) -> None:
        health_reason = _ABORT_HEALTH.get(reason)
        if health_reason is None or response_id in self._learned:
            return  # one failed request counts once, however often it is aborted
        self._learned[response_id] = None
        if len(self._learned) > _LEARNED_LIMIT:
            self._learned.popitem(last=False)
        destination = self.inflight.recent(response_id)
        if isinstance(destination, ProviderChoice):
            cooldown = self.router.health.report(destination.ref, health_reason, detail)
            log.warning(
                "provider %s cooling down: %s (%d reports)",
                destination.ref,
                health_reason,
                cooldown.count,
            )

    def reap(self) -> None:
        """Reclaim expired bodies and in-flight entries (run periodically)."""
        for response_id in self.store.reap_expired_parked():
            self.inflight.release(response_id)
            self._hand_back(response_id)
            self._metrics.bodies_reclaimed.labels("ttl_unpulled").inc()
        for _ in range(self.store.reap_expired_pending()):
            self._metrics.bodies_reclaimed.labels("ttl_unpicked").inc()
        self.preparation.drop(lambda stream_id: not self.store.is_pending(stream_id))
        for response_id in self.inflight.expire():
            self._hand_back(response_id)

    def _hand_back(self, response_id: int) -> None:
        """Return the budget reserved for a request that will not report its tokens."""
        self.router.tenants.cancel(self._reservations.pop(response_id, None))


def _usage_asked(request: InferenceRequest) -> bool:
    options = request.fields.values.get("stream_options")
    return request.stream and isinstance(options, dict) and options.get("include_usage") is True


def _served(report: FinalReport, assignment: Assignment) -> Served:
    started = assignment.first_token_at
    return Served(
        prompt_tokens=report.prompt_tokens,
        cached_tokens=report.cached_tokens,
        itl_bucket_counts=report.itl_bucket_counts,
        ttft_ms=assignment.ttft_ms,
        service_ms=None if started is None else (time.monotonic() - started) * 1000.0,
    )


def _check_itl(report: FinalReport) -> None:
    counts, layout = report.itl_bucket_counts, report.itl_bucket_layout
    if not counts:
        return
    if layout != 1:
        raise InvalidArgument(f"unknown itl_bucket_layout {layout}; this server knows layout 1")
    if len(counts) != ITL_LAYOUT_1_BUCKETS:
        raise InvalidArgument(
            f"itl_bucket_counts has {len(counts)} entries; layout 1 has {ITL_LAYOUT_1_BUCKETS}"
        )


class _ResponseIdsInUse:
    """Response ids still answered for: in flight, or naming a parked body."""

    def __init__(self, inflight: InFlight, store: BodyStore) -> None:
        self._inflight = inflight
        self._store = store

    def __contains__(self, response_id: object) -> bool:
        if response_id in self._inflight:
            return True
        return isinstance(response_id, int) and self._store.is_parked(response_id)

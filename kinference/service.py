"""The per-request flow over the body store and the routing core.

PushBody -> Pick -> PullBody -> reports, Abort and TTL: this module keeps the body store,
the in-flight table and the metrics consistent through every path a request can take. The
gRPC servicer calls it and converts; nothing here knows about gRPC.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from kinference.bodies import Body, BodyStore, Pull, Upload
from kinference.kvcache.precise import PreciseQuery
from kinference.metrics import Metrics
from kinference.ops.recorder import RequestRecorder
from kinference.preparation import PickPreparation, Preparer
from kinference.reports import Reports
from kinference.requests import InferenceRequest, RewritePlan, rewrite
from kinference.requests.offload import Offload
from kinference.requests.rewrite import Translation
from kinference.requests.translation import Untranslatable
from kinference.response_ids import ResponseIdsInUse
from kinference.routing import Decision, Destination, InFlight, Outcome, Reason, RouteQuery, Router
from kinference.service_types import FinalReport, PickCall, PickResult

__all__ = ["FinalReport", "PickCall", "PickResult", "PickerService"]

log = logging.getLogger(__name__)


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
        self.reports = Reports(store, router, inflight, metrics, self._recorder)
        self._ids_in_use = ResponseIdsInUse(inflight, store)
        self._picking = 0  # async Picks under way: each holds a body taken from the store

    @property
    def idle(self) -> bool:
        """No body held, pushed or being picked: a draining instance may stop."""
        return self._picking == 0 and self.store.idle

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
        admission and reservation included, stays in one loop turn; the prefix index's
        record of it and the Pick's metrics, in the next, once the request is on its way:
        `settle`)."""
        started = time.perf_counter()
        body = self.store.take(call.stream_id)
        self._picking += 1  # until the body is parked or released (a drain waits for it)
        try:
            return await self._pick_taken(body, call, started)
        finally:
            self._picking -= 1

    async def _pick_taken(self, body: Body, call: PickCall, started: float) -> PickResult:
        try:
            ready = await self.preparation.ready(call.stream_id, body)
        except BaseException:  # (a bug's exception too: the Pick fails UNKNOWN, held nothing)
            self.store.release(body)  # (again, where a step released it already: a no-op)
            raise
        try:
            tenants, config = self.router.tenants, self.router.policy.config
            # (a tenant without a budget never waits: no coroutine is made for it)
            if not isinstance(ready.parsed, str) and tenants.budgeted(config, call.tenant):
                await self.preparation.guarded(body, tenants.ready(config, call.tenant))
            self.preparation.deciding(ready)  # the rest of this Pick is one loop step
            asyncio.get_running_loop().call_soon(self.settle)
            return self._decided(body, call, started, ready.parsed, precise=ready.precise,
                                 translated=ready.translated, later=True)  # fmt: skip
        finally:
            if ready.held:
                self.store.budget.release(ready.held)

    def settle(self) -> None:
        """Apply what the Picks answered so far left for after their answer (their prefix
        records, their metrics); the loop runs it in the step after each async Pick, and a
        reader that wants them at once (a test) calls it."""
        self.router.flush_prefix_records()
        self._recorder.flush()

    def _decided(
        self,
        body: Body,
        call: PickCall,
        started: float,
        parsed: InferenceRequest | str,
        *,
        precise: PreciseQuery | None = None,
        translated: Translation | Untranslatable | None = None,
        later: bool = False,
    ) -> PickResult:
        try:
            result = self._decide(body, call, parsed, precise, translated)
        except BaseException:
            self.store.release(body)
            raise
        if result.response_id == 0:  # nothing will pull this body
            self.store.release(body)
        request_id = call.client_request_id or body.client_request_id
        record = self._recorder.picked_later if later else self._recorder.picked
        record(result, request_id, time.perf_counter() - started)
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
        response_id = self.store.id_source.new_id(self._ids_in_use)
        request_id = call.client_request_id or body.client_request_id
        self.inflight.add(response_id, destination, call.tenant, decision.prefix_hashes, request_id)
        # Charged in the same loop turn as the admission check: no other Pick runs between.
        reservation = self.router.tenants.reserve(
            self.router.policy.config, call.tenant, request.token_estimate,
            request.max_output_tokens,
        )  # fmt: skip
        if reservation is not None:
            self.reports.hold(response_id, reservation)
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
            usage_asked=sent is not None and request.usage_asked(),
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
        return self.reports.first_token(response_id, ttft_ms, upstream_status, ago_s=ago_s)

    def final_token(self, report: FinalReport) -> bool:
        """Record a finished response, count its tokens, stop counting it as load."""
        return self.reports.final_token(report)

    def abort(self, response_id: int, reason: str, detail: str) -> None:
        """Release the body and the in-flight slot; NotFound when nothing was held."""
        self.reports.abort(response_id, reason, detail)

    def reap(self) -> None:
        """Reclaim expired bodies and in-flight entries (run periodically)."""
        for response_id in self.store.reap_expired_parked():
            self.inflight.release(response_id)
            self.reports.hand_back(response_id)
            self._metrics.bodies_reclaimed.labels("ttl_unpulled").inc()
        for _ in range(self.store.reap_expired_pending()):
            self._metrics.bodies_reclaimed.labels("ttl_unpicked").inc()
        self.preparation.drop(lambda stream_id: not self.store.is_pending(stream_id))
        for response_id in self.inflight.expire():
            self.reports.hand_back(response_id)

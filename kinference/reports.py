"""What the caller reports after a Pick: the first token, the final token, an Abort.

Each report releases what its request holds exactly once (the in-flight slot, a parked
body, the tenant's budget reservation) and teaches the routing core what it saw: TTFT and
service time for the worker's rates, tokens for the tenant's usage, a provider's refusal
for its health. `PickerService` holds one and answers the reports through it.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

from kinference.bodies import BodyStore
from kinference.errors import InvalidArgument, NotFound
from kinference.itl_layout import BUCKETS as ITL_LAYOUT_1_BUCKETS
from kinference.metrics import Metrics
from kinference.ops.recorder import RequestRecorder
from kinference.routing import Assignment, InFlight, LocalChoice, ProviderChoice, Router
from kinference.routing.health import UNAUTHORIZED, UNRESOLVED
from kinference.routing.learning import Served
from kinference.routing.tenants import Reservation
from kinference.service_types import FinalReport

log = logging.getLogger(__name__)

# Abort reasons that tell the picker something about a provider it cannot see itself.
_ABORT_HEALTH = {"BACKEND_UNRESOLVED": UNRESOLVED, "BACKEND_UNAUTHORIZED": UNAUTHORIZED}
_LEARNED_LIMIT = 10_000  # aborted ids remembered so repeats do not count twice
TTFT_ROUNDING_MS = 1.0  # a caller's TTFT is whole milliseconds (rounded, or truncated)


class Reports:
    """The reports of one instance's requests, and the budget reservations they settle."""

    def __init__(
        self,
        store: BodyStore,
        router: Router,
        inflight: InFlight,
        metrics: Metrics,
        recorder: RequestRecorder,
    ) -> None:
        self._store = store
        self._router = router
        self._inflight = inflight
        self._metrics = metrics
        self._recorder = recorder
        # Label lookups cost microseconds on every request: bind the children once.
        self._reports = {
            (kind, known): metrics.reports.labels(kind, str(known).lower())
            for kind in ("first_token", "final_token")
            for known in (True, False)
        }
        self._learned: OrderedDict[int, None] = OrderedDict()  # response ids already counted
        # Tenant budget reservations of requests in flight, settled or handed back with them.
        self._reservations: dict[int, Reservation] = {}

    def hold(self, response_id: int, reservation: Reservation) -> None:
        """Keep a picked request's budget reservation until its final report or release."""
        self._reservations[response_id] = reservation

    def first_token(
        self, response_id: int, ttft_ms: int, upstream_status: int, *, ago_s: float = 0.0
    ) -> bool:
        """Record the first response byte (`ago_s` seconds ago: a report that came late,
        riding on the final one); False when the id is not in flight."""
        assignment = self._inflight.get(response_id)
        self._reports["first_token", assignment is not None].inc()
        if assignment is None:
            return False
        if assignment.first_token_at is not None:
            return True  # a repeated report: recorded and taught once
        # No first token came before the Pick: a longer `ago_s` (a caller's clock gone back)
        # would make a service time longer than the request (up to 2^32 ms, `_served`).
        ago_s = min(ago_s, self._inflight.age_s(assignment))
        assignment.first_token_at = time.monotonic() - ago_s
        ttft = min(float(ttft_ms), self._since_pick_ms(assignment, ago_s))
        self._recorder.first_token(assignment, ttft, upstream_status)
        destination = assignment.destination
        if isinstance(destination, LocalChoice):
            if upstream_status < 400:
                assignment.ttft_ms = ttft
                self._router.first_token(destination, ttft)
                if self._router.precise is not None:  # the engine ran it: events are due
                    self._router.precise.served(destination)
            else:  # no token came: its prefill is no longer pending either
                self._router.first_token_failed(destination)
        elif upstream_status >= 400:
            self._router.health.upstream_status(destination.ref, upstream_status)
        return True

    def _since_pick_ms(self, assignment: Assignment, ago_s: float) -> float:
        """The longest TTFT the request can have had: the time from its Pick to its first
        token (reported `ago_s` ago), plus the caller's rounding to whole milliseconds. A
        caller measures from its dispatch, after the Pick; a longer TTFT is no measurement
        (a caller's clock gone back, wrapped to the uint32's top) and, learned as it is,
        would price its worker out for good: no request goes there to teach otherwise."""
        since_s = max(self._inflight.age_s(assignment) - ago_s, 0.0)
        return since_s * 1000.0 + TTFT_ROUNDING_MS

    def final_token(self, report: FinalReport) -> bool:
        """Record a finished response, count its tokens, stop counting it as load."""
        try:
            _check_itl(report)
        except InvalidArgument:
            self._refused(report.response_id)
            raise
        assignment = self._inflight.release(report.response_id)
        self._reports["final_token", assignment is not None].inc()
        if assignment is None:
            return False
        self._recorder.final_token(report, assignment)
        self._router.tenants.settle(
            self._reservations.pop(report.response_id, None),
            report.prompt_tokens,
            report.completion_tokens,
        )
        local = assignment.local
        if local is not None:
            self._router.final(local, _served(report, assignment))
        if self._store.drop_parked(report.response_id):  # finished without pulling: odd
            self._metrics.bodies_reclaimed.labels("final_report").inc()
        return True

    def _refused(self, response_id: int) -> None:
        """A final report refused (its ITL buckets unreadable) is not taken: it counts no
        tokens and teaches nothing. Its request is over all the same (a caller does not
        send INVALID_ARGUMENT again): what it holds is released now, as an Abort would,
        rather than counted as load until its TTL."""
        self._inflight.release(response_id)
        self.hand_back(response_id)
        if self._store.drop_parked(response_id):
            self._metrics.bodies_reclaimed.labels("final_report").inc()

    def abort(self, response_id: int, reason: str, detail: str) -> None:
        """Release the body and the in-flight slot; NotFound when nothing was held.

        A provider the caller could not resolve or was refused by cools down even when the
        Abort comes after the request was released: the caller knows what we cannot see.
        """
        self._learn_from_abort(response_id, reason, detail)
        dropped_body = self._store.drop_parked(response_id)
        assignment = self._inflight.release(response_id)
        self.hand_back(response_id)
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
        destination = self._inflight.recent(response_id)
        if isinstance(destination, ProviderChoice):
            cooldown = self._router.health.report(destination.ref, health_reason, detail)
            log.warning(
                "provider %s cooling down: %s (%d reports)",
                destination.ref,
                health_reason,
                cooldown.count,
            )

    def hand_back(self, response_id: int) -> None:
        """Return the budget reserved for a request that will not report its tokens."""
        self._router.tenants.cancel(self._reservations.pop(response_id, None))


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

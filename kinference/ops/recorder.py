"""Per-request metrics and log lines beyond the service's own counting.

The service calls one method per event of a request; this module turns it into label
children bound once (label lookups cost microseconds per request) and into log lines that
name the request by its caller's `client_request_id` and never carry any of its body.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter

from kinference.metrics import Metrics
from kinference.ops.reasons import CODES, label
from kinference.ops.tenants import TenantLabels
from kinference.routing import LocalChoice, Outcome, ProviderChoice
from kinference.routing.inflight import Assignment
from kinference.service_types import FinalReport, PickResult

log = logging.getLogger(__name__)

_TOKEN_KINDS = ("prompt", "completion", "cached")
_DETAIL_CHARS = 200  # longest Abort detail logged, in characters
DEFAULT_MAX_TENANTS = 100  # tenant label values kept, when the caller does not say


class RequestRecorder:
    """Counts picks by outcome and reason, latency and tokens; logs each request's steps."""

    def __init__(self, metrics: Metrics, tenants: TenantLabels | None = None) -> None:
        self._metrics = metrics
        self._tenant_labels = tenants or TenantLabels(DEFAULT_MAX_TENANTS)
        self._picks = {outcome: metrics.picks.labels(outcome.value) for outcome in Outcome}
        # Every (outcome, code) child exists from the start, so dashboards see zeros.
        self._reasons = {
            (outcome.value, code): metrics.pick_reasons.labels(outcome.value, code)
            for outcome in Outcome
            for code in CODES
        }
        self._tokens = {kind: metrics.tokens.labels(kind) for kind in _TOKEN_KINDS}
        self._ttft = {kind: metrics.ttft.labels(kind) for kind in ("local", "provider")}
        self._predicted = metrics.prefix_cached_tokens.labels("predicted")
        self._tenants: dict[str, tuple[Counter, Counter]] = {}  # label value -> token counters
        self._reported = metrics.prefix_cached_tokens.labels("reported")
        self._unrecorded: list[tuple[PickResult, str, float]] = []  # `picked_later`'s

    def picked_later(self, result: PickResult, client_request_id: str, seconds: float) -> None:
        """`picked`, applied by the next `flush` (the picker's step after the answer: its
        three metric updates, ~3 µs warm and several times that in a busy gateway, are
        not on the request's way to its engine)."""
        self._unrecorded.append((result, client_request_id, seconds))

    def flush(self) -> None:
        """Apply what `picked_later` kept, in order."""
        unrecorded, self._unrecorded = self._unrecorded, []
        for result, client_request_id, seconds in unrecorded:
            self.picked(result, client_request_id, seconds)

    def picked(self, result: PickResult, client_request_id: str, seconds: float) -> None:
        outcome = result.outcome.value
        code = label(result.code)
        self._picks[result.outcome].inc()
        self._reasons[outcome, code].inc()
        self._metrics.pick_seconds.observe(seconds)
        if log.isEnabledFor(logging.DEBUG):
            fields = _where(result.destination)
            fields |= {"client_request_id": client_request_id, "outcome": outcome}
            fields |= {"reason": code, "response_id": result.response_id}
            fields["pick_ms"] = round(seconds * 1000, 3)
            log.debug("pick", extra=fields)

    def first_token(self, assignment: Assignment, ttft_ms: float, upstream_status: int) -> None:
        if upstream_status < 400:
            kind = "local" if assignment.local is not None else "provider"
            self._ttft[kind].observe(max(ttft_ms, 0) / 1000)
        local = assignment.local
        if local is not None and log.isEnabledFor(logging.DEBUG):
            fields = {
                "client_request_id": assignment.client_request_id,
                "ttft_ms": ttft_ms,
                "endpoint": local.endpoint,
                "predicted_ttft_ms": local.predicted_ttft_ms,
                "predicted_wait_ms": local.predicted_wait_ms,
                "prompt_tokens": local.prompt_tokens,
                "cached_tokens": local.cached_tokens,
            }
            log.debug("first token", extra=fields)

    def final_token(self, report: FinalReport, assignment: Assignment) -> None:
        """Count a released request's tokens (the service checked the ITL layout)."""
        self._tokens["prompt"].inc(report.prompt_tokens)
        self._tokens["completion"].inc(report.completion_tokens)
        prompt, completion = self._tenant_children(assignment.tenant)
        prompt.inc(report.prompt_tokens)
        completion.inc(report.completion_tokens)
        if report.itl_bucket_counts:
            self._metrics.itl.add(report.itl_bucket_counts)
        if report.cached_tokens is not None:  # no more than the prompt, whatever it says
            cached = min(report.cached_tokens, report.prompt_tokens)
            self._tokens["cached"].inc(cached)
            self._prefix(assignment.local, report.prompt_tokens, cached)
        if log.isEnabledFor(logging.DEBUG):
            fields = {"client_request_id": assignment.client_request_id,
                      "response_id": report.response_id, "prompt_tokens": report.prompt_tokens,
                      "completion_tokens": report.completion_tokens,
                      "cached_tokens": report.cached_tokens}  # fmt: skip
            log.debug("final report", extra=fields)

    def _tenant_children(self, tenant: str) -> tuple[Counter, Counter]:
        """The tenant's (prompt, completion) counters, bound once per label value (the
        cap bounds this cache too)."""
        label = self._tenant_labels.label(tenant)
        children = self._tenants.get(label)
        if children is None:
            family = self._metrics.tenant_tokens
            children = self._tenants[label] = (
                family.labels(label, "prompt"),
                family.labels(label, "completion"),
            )
        return children

    def _prefix(self, local: LocalChoice | None, prompt_tokens: int, cached_tokens: int) -> None:
        """Predicted against reported prefix-cache hits, over the same local requests: the
        predicted share of the prompt (cached tokens predicted on the chosen worker) applied
        to the reported prompt tokens."""
        if local is None or prompt_tokens <= 0:
            return
        share = local.cached_tokens / local.prompt_tokens if local.prompt_tokens > 0 else 0.0
        if local.predicted_cached_tokens is not None:  # precise: the engine's own blocks
            predicted = min(local.predicted_cached_tokens, prompt_tokens)
            self._metrics.prefix_precise_error_tokens.observe(abs(predicted - cached_tokens))
        self._predicted.inc(round(prompt_tokens * min(share, 1.0)))
        self._reported.inc(min(cached_tokens, prompt_tokens))
        self._metrics.prefix_prompt_tokens.inc(prompt_tokens)

    def aborted(
        self, response_id: int, reason: str, detail: str, assignment: Assignment | None
    ) -> None:
        """Log an Abort; its detail is the caller's words about its upstream, cut short."""
        log.info(
            "abort",
            extra={
                "client_request_id": assignment.client_request_id if assignment else "",
                "response_id": response_id,
                "abort_reason": reason,
                "detail": detail[:_DETAIL_CHARS],
            },
        )


def _where(destination: LocalChoice | ProviderChoice | None) -> dict[str, object]:
    if isinstance(destination, LocalChoice):
        return {"endpoint": destination.endpoint, "pool": destination.pool,
                "model": destination.model}  # fmt: skip
    if isinstance(destination, ProviderChoice):
        return {"provider": destination.ref, "model": destination.model}
    return {}

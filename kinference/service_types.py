"""What the per-request flow is asked and answers: a Pick as the caller phrased it, its
result, and a final report. Their own module so that the service and the per-request
recorder (which the service calls) both read them without importing each other."""

from __future__ import annotations

from kinference.records import record
from kinference.requests import Shape
from kinference.routing.decision import Outcome, QoS
from kinference.routing.inflight import Destination
from kinference.routing.reasons import Reason


@record
class PickCall:
    """A Pick as the caller phrased it."""

    stream_id: int
    pool: str | None = None  # `namespace/name` of the InferencePool the caller named
    qos: QoS = QoS.INTERACTIVE
    tenant: str = ""
    client_request_id: str = ""


@record
class PickResult:
    """The answer to a Pick; `response_id` is 0 unless the outcome dispatches."""

    outcome: Outcome
    response_id: int = 0
    destination: Destination | None = None
    reason: str = ""
    code: Reason = Reason.NONE  # the reason as a typed code (metric label)
    body_total_bytes: int = 0
    requested_model: str = ""
    # Extensions the caller reads from Pick's call metadata (kinference.api.extensions).
    retry_after_s: int | None = None
    # (written, sent): the body was translated between API shapes, so is its response.
    translated: tuple[Shape, Shape] | None = None
    local_path: str = ""  # a local pick's path, when it replaces the client's
    usage_asked: bool = False  # a translated stream whose client asked for a usage chunk


@record
class FinalReport:
    """ReportFinalToken's content."""

    response_id: int
    model: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None
    itl_bucket_counts: tuple[int, ...]
    itl_bucket_layout: int

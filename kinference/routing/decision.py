"""What the router is asked and what it answers."""

from __future__ import annotations

import enum
import math

from kinference.config.models import MaxTokensField
from kinference.kvcache.precise import PreciseQuery
from kinference.records import record
from kinference.requests import InferenceRequest, Shape
from kinference.routing.reasons import Reason


class Outcome(enum.Enum):
    """Routing outcomes, as the spec's PickResponse.Outcome names them."""

    OK = "ok"
    NO_WORKERS = "no_workers"
    DEGRADED = "degraded"
    BAD_REQUEST = "bad_request"
    POLICY_REJECTED = "policy_rejected"


class QoS(enum.Enum):
    INTERACTIVE = "INTERACTIVE"
    BATCH = "BATCH"
    DEFERRABLE = "DEFERRABLE"


@record
class RouteQuery:
    """A parsed request and what the caller said about it besides its body."""

    request: InferenceRequest
    pool: str | None = None  # `namespace/name` of the InferencePool the caller named
    qos: QoS = QoS.INTERACTIVE
    tenant: str = ""
    precise: PreciseQuery | None = None  # the prompt in precise pools' engine blocks


@record
class LocalChoice:
    """A worker in a pool."""

    endpoint: str
    slot: int
    pool: str  # namespace/name
    model: str  # as the pool's engines know it
    prompt_tokens: float = 0.0  # the request's estimate
    cached_tokens: float = 0.0  # predicted cached on this worker (its cached-tokens source)
    predicted_ttft_ms: float | None = None  # the TTFT model's estimate, when it ran
    predicted_wait_ms: float = 0.0  # the part of it spent behind other requests
    # Sequences it joined on the worker (itself included), as the TTFT model saw them, and
    # the requests ended there before the pick (`WorkerTable.ended`; NaN: not read).
    sequences: float = 0.0
    ended_before: float = math.nan
    # Whether it joined one past the most its pool was seen running without the unknown
    # batch's doubt, the pool's one such pick in flight (`WorkerTable.probing`).
    probe: bool = False
    hashes: tuple[int, ...] = ()  # the prompt's approximate prefix blocks
    # Leading blocks the approximate index held on this worker at the pick, and how many
    # distinct blocks had been recorded on it since the deepest of them (its age:
    # `routing.prefix_store.MAX_WALK`): eviction learning.
    held_blocks: int = 0
    held_age: int | None = None
    # False when blocks the index counts on the worker were still being prefilled there
    # by another pick: they may not be computed yet, so a short report then says nothing
    # of evictions.
    settled: bool = True
    # Precise pools only: prompt tokens the engine's events say it has cached there.
    predicted_cached_tokens: int | None = None
    # The prompt's text characters when it is complete (0: not a sample of characters per
    # token), and the estimate's fixed part (`Prompt.fixed_tokens`): the reported
    # `prompt_tokens` teach the model's characters per token (`routing.textsize`).
    text_chars: int = 0
    fixed_tokens: int = 0

    @property
    def prefix_blocks(self) -> int:
        """Leading blocks the approximate index held on this worker at the pick."""
        return self.held_blocks

    @property
    def prefix_total(self) -> int:
        return len(self.hashes)

    @property
    def uncached_tokens(self) -> float:
        return max(self.prompt_tokens - self.cached_tokens, 0.0)


@record
class ProviderChoice:
    """An off-cluster provider; the caller resolves `ref` and applies `path`."""

    ref: str  # namespace/name
    path: str
    model: str


@record
class Decision:
    """A routing decision: a destination when the outcome dispatches, else a reason."""

    outcome: Outcome
    local: LocalChoice | None = None
    provider: ProviderChoice | None = None
    reason: str = ""
    code: Reason = Reason.NONE  # the reason as a typed code (the metric label)
    canonical_model: str = ""
    max_tokens_field: MaxTokensField | None = None
    # The API shape the body is rewritten to when the destination speaks another one than
    # the client wrote (None: sent as written), and for a local pick the path it goes to.
    sent_shape: Shape | None = None
    local_path: str = ""
    retry_after_s: int | None = None  # when a retry can succeed, if the router knows

    @property
    def prefix_hashes(self) -> tuple[int, ...]:
        return self.local.hashes if self.local is not None else ()

    @property
    def dispatches(self) -> bool:
        return self.local is not None or self.provider is not None

    @property
    def served_model(self) -> str:
        if self.local is not None:
            return self.local.model
        return self.provider.model if self.provider is not None else ""

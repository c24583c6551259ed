"""What the router is asked and what it answers."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kinference.config.models import MaxTokensField
from kinference.kvcache.precise import PreciseQuery
from kinference.requests import InferenceRequest


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


@dataclass(frozen=True, slots=True)
class RouteQuery:
    """A parsed request and what the caller said about it besides its body."""

    request: InferenceRequest
    pool: str | None = None  # `namespace/name` of the InferencePool the caller named
    qos: QoS = QoS.INTERACTIVE
    tenant: str = ""
    precise: PreciseQuery | None = None  # the prompt in precise pools' engine blocks


@dataclass(frozen=True, slots=True)
class LocalChoice:
    """A worker in a pool."""

    endpoint: str
    slot: int
    pool: str  # namespace/name
    model: str  # as the pool's engines know it
    prefix_blocks: int = 0  # leading blocks the worker probably has cached
    prefix_total: int = 0
    # Precise pools only: prompt tokens the engine's events say it has cached there.
    predicted_cached_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ProviderChoice:
    """An off-cluster provider; the caller resolves `ref` and applies `path`."""

    ref: str  # namespace/name
    path: str
    model: str


@dataclass(frozen=True, slots=True)
class Decision:
    """A routing decision: a destination when the outcome dispatches, else a reason."""

    outcome: Outcome
    local: LocalChoice | None = None
    provider: ProviderChoice | None = None
    reason: str = ""
    canonical_model: str = ""
    max_tokens_field: MaxTokensField | None = None
    prefix_hashes: tuple[int, ...] = ()

    @property
    def dispatches(self) -> bool:
        return self.local is not None or self.provider is not None

    @property
    def served_model(self) -> str:
        if self.local is not None:
            return self.local.model
        return self.provider.model if self.provider is not None else ""

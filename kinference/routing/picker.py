"""The routing decision: which endpoint serves a parsed inference request."""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

from kinference.routing.catalog import Candidate, Catalog, NoCandidates, PoolRef
from kinference.routing.inflight import InFlight


class Outcome(enum.Enum):
    """Routing outcomes, as the spec's PickResponse.Outcome names them."""

    OK = "ok"
    NO_WORKERS = "no_workers"
    DEGRADED = "degraded"
    BAD_REQUEST = "bad_request"
    POLICY_REJECTED = "policy_rejected"


class QoS(enum.Enum):
    INTERACTIVE = "interactive"
    BATCH = "batch"
    DEFERRABLE = "deferrable"


@dataclass(frozen=True, slots=True)
class RouteQuery:
    """What the caller said about a request besides its body."""

    model: str
    pool: PoolRef | None = None
    qos: QoS = QoS.INTERACTIVE
    tenant: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    """A routing decision: a candidate when the outcome dispatches, else a reason."""

    outcome: Outcome
    candidate: Candidate | None = None
    reason: str = ""


class Router:
    """Chooses among the catalog's candidates by fewest in-flight requests.

    Ties are broken at random so equal endpoints share load instead of the first one
    taking every burst.
    """

    def __init__(self, catalog: Catalog, inflight: InFlight, rng: random.Random) -> None:
        self.catalog = catalog
        self._inflight = inflight
        self._rng = rng

    def route(self, query: RouteQuery) -> Decision:
        try:
            candidates = self.catalog.candidates(query.model, query.pool)
        except NoCandidates as exc:
            return Decision(Outcome.NO_WORKERS, reason=str(exc))
        return Decision(Outcome.OK, self._least_loaded(candidates))

    def _least_loaded(self, candidates: list[Candidate]) -> Candidate:
        loads = [self._inflight.load(c.endpoint) for c in candidates]
        fewest = min(loads)
        return self._rng.choice([c for c, n in zip(candidates, loads, strict=True) if n == fewest])

"""The routing core: candidates, load and the decision. Knows nothing of gRPC or Redis."""

from kinference.routing.catalog import Candidate, Catalog, NoCandidates, PoolRef
from kinference.routing.inflight import Assignment, InFlight
from kinference.routing.picker import Decision, Outcome, QoS, RouteQuery, Router

__all__ = [
    "Assignment",
    "Candidate",
    "Catalog",
    "Decision",
    "InFlight",
    "NoCandidates",
    "Outcome",
    "PoolRef",
    "QoS",
    "RouteQuery",
    "Router",
]

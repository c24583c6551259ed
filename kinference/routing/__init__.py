"""The routing core: candidates, load, scoring and the decision. Knows nothing of gRPC or
Redis; reads the policy and the shared per-worker state it is given."""

from kinference.routing.catalog import Catalog
from kinference.routing.decision import (
    Decision,
    LocalChoice,
    Outcome,
    ProviderChoice,
    QoS,
    RouteQuery,
)
from kinference.routing.health import CooldownPolicy, ProviderHealth
from kinference.routing.inflight import Assignment, Destination, InFlight
from kinference.routing.policy import RoutingPolicy, compile_policy
from kinference.routing.prefix import PrefixIndex
from kinference.routing.router import Router
from kinference.routing.table import WorkerTable
from kinference.routing.tenants import TenantGate

__all__ = [
    "Assignment",
    "Catalog",
    "CooldownPolicy",
    "Decision",
    "Destination",
    "InFlight",
    "LocalChoice",
    "Outcome",
    "PrefixIndex",
    "ProviderChoice",
    "ProviderHealth",
    "QoS",
    "RouteQuery",
    "Router",
    "RoutingPolicy",
    "TenantGate",
    "WorkerTable",
    "compile_policy",
]

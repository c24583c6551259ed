"""The routing core: candidates, load, the plugin pipeline and the decision. Knows nothing
of gRPC or Redis; reads the policy and the shared per-worker state it is given.

The names below are loaded on first use (PEP 562): the config layer imports the plugins'
config models from `kinference.routing.*` submodules, and importing this package must not
pull the router (which reads the config) in while the config package is being built.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from kinference.routing.reasons import Reason
    from kinference.routing.router import Router
    from kinference.routing.table import WorkerTable
    from kinference.routing.tenants import TenantGate

_HOMES = {
    "Catalog": "catalog",
    "Decision": "decision",
    "LocalChoice": "decision",
    "Outcome": "decision",
    "ProviderChoice": "decision",
    "QoS": "decision",
    "RouteQuery": "decision",
    "CooldownPolicy": "health",
    "ProviderHealth": "health",
    "Assignment": "inflight",
    "Destination": "inflight",
    "InFlight": "inflight",
    "RoutingPolicy": "policy",
    "compile_policy": "policy",
    "PrefixIndex": "prefix",
    "Reason": "reasons",
    "Router": "router",
    "WorkerTable": "table",
    "TenantGate": "tenants",
}

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
    "Reason",
    "RouteQuery",
    "Router",
    "RoutingPolicy",
    "TenantGate",
    "WorkerTable",
    "compile_policy",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)

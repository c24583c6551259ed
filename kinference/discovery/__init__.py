"""Kubernetes discovery: InferencePools and their ready pods, merged with the policy file.

`build_discovery(settings, ...)` returns a `Discovery` when `KINFERENCE_DISCOVERY=kubernetes`
(it needs the `k8s` extra); docs/discovery.md describes the behaviour and the RBAC needed.
Nothing here imports the Kubernetes client until discovery is built.
"""

from kinference.discovery.api import ApiError, K8sExtraMissing, KubeApi, WatchGone
from kinference.discovery.kubernetes import KubernetesDiscovery
from kinference.discovery.pools import DiscoveredPool, PoolSpec
from kinference.discovery.setup import Discovery, build_discovery, check_discovery
from kinference.discovery.source import PolicySource
from kinference.discovery.watch import Reflector, WatchStats, WatchTiming

__all__ = [
    "ApiError",
    "DiscoveredPool",
    "Discovery",
    "K8sExtraMissing",
    "KubeApi",
    "KubernetesDiscovery",
    "PolicySource",
    "PoolSpec",
    "Reflector",
    "WatchGone",
    "WatchStats",
    "WatchTiming",
    "build_discovery",
    "check_discovery",
]

"""InferencePools and their pods, as the pools the policy routes to.

An `inference.networking.k8s.io/v1` InferencePool selects pods by `spec.selector.matchLabels`
in its own namespace and names the port(s) they serve on in `spec.targetPorts`. Its
endpoints are `podIP:port` for every selected pod that is ready: it has an IP, its `Ready`
condition is `True`, and it is not being deleted (a terminating pod may still report Ready
while it drains; new requests must not go there).

The InferencePool does not say which models its servers run; annotations do (see
docs/discovery.md), or a policy-file pool of the same namespace/name (`source.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kinference.settings import format_host_port

API_GROUP = "inference.networking.k8s.io"
API_VERSION = "v1"
MODELS_ANNOTATION = "kinference.io/models"  # comma-separated model names
ENGINE_ANNOTATION = "kinference.io/engine"  # vllm, sglang, trtllm or none
METRICS_PATH_ANNOTATION = "kinference.io/metrics-path"


@dataclass(frozen=True)
class PoolSpec:
    """What one InferencePool object says, read defensively (the API is not trusted)."""

    namespace: str
    name: str
    resource_version: str
    match_labels: tuple[tuple[str, str], ...]
    ports: tuple[int, ...]
    annotations: Mapping[str, str]

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def label_selector(self) -> str:
        """The selector as a `labelSelector` query value, e.g. `app=vllm,tier=gpu`."""
        return ",".join(f"{key}={value}" for key, value in self.match_labels)

    @property
    def models(self) -> tuple[str, ...]:
        listed = self.annotations.get(MODELS_ANNOTATION, "")
        return tuple(model.strip() for model in listed.split(",") if model.strip())


@dataclass(frozen=True)
class DiscoveredPool:
    """An InferencePool with the endpoints of its ready pods."""

    spec: PoolSpec
    endpoints: tuple[str, ...]


def pools_path(namespace: str) -> str:
    return f"/apis/{API_GROUP}/{API_VERSION}/namespaces/{namespace}/inferencepools"


def pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


def read_pool(obj: Mapping[str, Any], namespace: str) -> PoolSpec | None:
    """The spec of an InferencePool object listed in `namespace`; None when it selects
    nothing usable.

    An empty selector would select every pod of the namespace, and no port leaves nothing
    to send to: both are refused (the CRD's validation forbids them too).
    """
    metadata = _mapping(obj.get("metadata"))
    spec = _mapping(obj.get("spec"))
    labels = _mapping(_mapping(spec.get("selector")).get("matchLabels"))
    match_labels = tuple(sorted((str(k), str(v)) for k, v in labels.items()))
    ports = tuple(
        number
        for port in spec.get("targetPorts") or ()
        if isinstance(number := _mapping(port).get("number"), int) and 0 < number < 65536
    )
    if not match_labels or not ports or not metadata.get("name"):
        return None
    annotations = _mapping(metadata.get("annotations"))
    return PoolSpec(
        namespace=str(metadata.get("namespace") or namespace),
        name=str(metadata["name"]),
        resource_version=str(metadata.get("resourceVersion") or ""),
        match_labels=match_labels,
        ports=ports,
        annotations={str(k): str(v) for k, v in annotations.items()},
    )


def pod_ip_if_ready(pod: Mapping[str, Any]) -> str | None:
    """The pod's IP when it may take new requests, else None."""
    if _mapping(pod.get("metadata")).get("deletionTimestamp"):
        return None
    status = _mapping(pod.get("status"))
    ip = status.get("podIP")
    ready = any(
        _mapping(c).get("type") == "Ready" and _mapping(c).get("status") == "True"
        for c in status.get("conditions") or ()
    )
    return ip if ready and isinstance(ip, str) and ip else None


def endpoints(spec: PoolSpec, pods: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """`podIP:port` (IPv6 in brackets) for each ready pod the pool selects, sorted.

    Pods are matched against the selector here too: a pod watch may still hold pods of a
    selector the pool had before it changed.
    """
    wanted = dict(spec.match_labels)
    ips = {
        ip
        for pod in pods
        if _selects(wanted, _mapping(_mapping(pod.get("metadata")).get("labels")))
        and (ip := pod_ip_if_ready(pod))
    }
    return tuple(sorted(format_host_port(ip, port) for ip in ips for port in spec.ports))


def _selects(wanted: Mapping[str, str], labels: Mapping[str, Any]) -> bool:
    return all(labels.get(key) == value for key, value in wanted.items())


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}

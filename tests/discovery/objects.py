"""Kubernetes objects as the API server returns them, for the discovery tests."""

from __future__ import annotations

from typing import Any

from kinference.discovery.pools import pods_path, pools_path

NS = "models"
POOLS = pools_path(NS)
PODS = pods_path(NS)
APP_LABELS = {"app": "vllm-llama"}


def inference_pool(
    name: str,
    labels: dict[str, str] | None = None,
    ports: tuple[int, ...] = (8000,),
    models: str | None = "disc-model",
    engine: str | None = None,
) -> dict[str, Any]:
    """An `inference.networking.k8s.io/v1` InferencePool selecting `labels` on `ports`."""
    annotations = {}
    if models is not None:
        annotations["kinference.io/models"] = models
    if engine is not None:
        annotations["kinference.io/engine"] = engine
    return {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {
            "selector": {"matchLabels": labels or APP_LABELS},
            "targetPorts": [{"number": port} for port in ports],
            "endpointPickerRef": {"name": "kinference", "portNumber": 9002},
        },
    }


def pod(
    name: str,
    ip: str,
    labels: dict[str, str] | None = None,
    *,
    ready: bool = True,
    terminating: bool = False,
) -> dict[str, Any]:
    """A running pod with `ip`; its Ready condition is `ready`."""
    metadata: dict[str, Any] = {"name": name, "namespace": NS, "labels": labels or APP_LABELS}
    if terminating:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True" if ready else "False"},
            ],
        },
    }

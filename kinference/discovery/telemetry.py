"""Prometheus metrics of Kubernetes discovery, read from its state at scrape time."""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kinference.discovery.kubernetes import KubernetesDiscovery
from kinference.discovery.source import PolicySource
from kinference.discovery.watch import Reflector, WatchStats

_POOLS = "inferencepools"
_PODS = "pods"


class DiscoveryCollector(Collector):
    """Watch restarts, relists, last event age, endpoints and resource version per pool."""

    def __init__(self, discovery: KubernetesDiscovery, source: PolicySource) -> None:
        self._discovery = discovery
        self._source = source

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        discovery = self._discovery
        watches = {
            _POOLS: (discovery.pool_stats, [discovery.pool_reflector]),
            _PODS: (discovery.pod_stats, [w.reflector for w in discovery.pod_watches.values()]),
        }
        yield from _watch_families(watches)
        yield from self._pool_families()

    def _pool_families(self) -> Iterator[GaugeMetricFamily]:
        endpoints = GaugeMetricFamily(
            "kinference_discovery_pool_endpoints",
            "Ready endpoints of each discovered InferencePool.",
            labels=["pool"],
        )
        info = GaugeMetricFamily(
            "kinference_discovery_pool_info",
            "1 per discovered InferencePool, labelled with the resourceVersion in force; "
            "compare with PickRequest.inference_pool.resource_version.",
            labels=["pool", "resource_version", "routed"],
        )
        skipped = self._source.skipped
        for ref, pool in sorted(self._discovery.pools.items()):
            endpoints.add_metric([ref], len(pool.endpoints))
            routed = "false" if ref in skipped else "true"
            info.add_metric([ref, pool.spec.resource_version, routed], 1)
        yield endpoints
        yield info


def _watch_families(
    watches: dict[str, tuple[WatchStats, list[Reflector]]],
) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    restarts = CounterMetricFamily(
        "kinference_discovery_watch_restarts",
        "Watches re-opened after a failure or a dropped connection.",
        labels=["resource"],
    )
    relists = CounterMetricFamily(
        "kinference_discovery_relists",
        "Lists after a watch's first (410 Gone, or a failure before it resumed).",
        labels=["resource"],
    )
    age = GaugeMetricFamily(
        "kinference_discovery_last_event_age_seconds",
        "Seconds since the last list or watch event (bookmarks included); "
        "for pods, of the pool whose pods watch heard last longest ago.",
        labels=["resource"],
    )
    now = time.monotonic()
    for resource, (stats, reflectors) in watches.items():
        restarts.add_metric([resource], stats.watch_restarts)
        relists.add_metric([resource], stats.relists)
        seen = [r.last_event_at for r in reflectors]
        if seen and all(t is not None for t in seen):
            age.add_metric([resource], now - min(t for t in seen if t is not None))
    yield restarts
    yield relists
    yield age

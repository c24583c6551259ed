"""Prometheus metrics of the shared layer, read from the node at scrape time."""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kinference.cluster.node import ClusterNode


class ClusterCollector(Collector):
    def __init__(self, node: ClusterNode) -> None:
        self._node = node

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        node, reader = self._node, self._node.reader
        yield _gauge("kinference_redis_connected", "1 while Redis answers.", node.connected)
        yield _gauge(
            "kinference_cluster_bootstrapped",
            "1 once this replica loaded the shared state from Redis.",
            reader.bootstrapped,
        )
        age = time.monotonic() - reader.last_read_at if reader.last_read_at else float("nan")
        yield _gauge(
            "kinference_cluster_view_age_seconds",
            "Seconds since the events stream was last read (the shared view's staleness).",
            age,
        )
        yield _gauge(
            "kinference_cluster_stream_lag_seconds",
            "Age of the newest event applied, when it was applied.",
            reader.lag_s,
        )
        yield _gauge(
            "kinference_cluster_replicas", "Replicas with a live heartbeat.", node.replicas
        )
        yield _gauge(
            "kinference_cluster_outbox_events",
            "Events of this replica waiting to be published.",
            len(node.outbox),
        )
        applied = CounterMetricFamily(
            "kinference_cluster_events_applied",
            "Other replicas' events applied to this replica's view, by kind.",
            labels=["kind"],
        )
        for kind, count in sorted(node.view.applied.items()):
            applied.add_metric([_KINDS.get(kind, "other")], count)
        yield applied
        yield _counter(
            "kinference_cluster_resyncs",
            "Replicas' load re-read from their hash after a gap in their events.",
            reader.resyncs,
        )
        yield _counter(
            "kinference_cluster_flushes", "Batches published to Redis.", node.publisher.flushes
        )


_KINDS = {"p": "pick", "r": "release", "t": "first_token", "l": "itl", "g": "engine", "b": "cooled"}


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=float(value))


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=float(value))

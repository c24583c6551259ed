"""Prometheus metrics of the shared layer, read from the node at scrape time."""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kinference.cluster.leases import LeasedBudget
from kinference.cluster.node import ClusterNode


class ClusterCollector(Collector):
    def __init__(self, node: ClusterNode, budget: LeasedBudget | None = None) -> None:
        self._node = node
        self._budget = budget

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        node = self._node
        shards = list(node.shards)
        readers = [shard.reader for shard in shards]
        yield _gauge("kinference_redis_connected", "1 while Redis answers.", node.connected)
        yield _gauge(
            "kinference_cluster_bootstrapped",
            "1 once this replica loaded the shared state from Redis.",
            node.bootstrapped,
        )
        reads = [reader.last_read_at for reader in readers]
        now = time.monotonic()
        known = [at for at in reads if at is not None]
        age = max(now - at for at in known) if len(known) == len(reads) else float("nan")
        yield _gauge(
            "kinference_cluster_view_age_seconds",
            "Seconds since the events streams were last read (the shared view's staleness; "
            "the oldest of this replica's pool shards).",
            age,
        )
        yield _gauge(
            "kinference_cluster_stream_lag_seconds",
            "Age of the newest event applied, when it was applied (the worst shard).",
            max(reader.lag_s for reader in readers),
        )
        yield _gauge(
            "kinference_cluster_shards",
            "Events streams this replica reads: its pools' shards and the global one.",
            len(shards),
        )
        yield _gauge(
            "kinference_cluster_replicas", "Replicas with a live heartbeat.", node.replicas
        )
        yield _gauge(
            "kinference_cluster_outbox_events",
            "Events of this replica waiting to be published.",
            len(node.outbox),
        )
        yield _counter(
            "kinference_cluster_outbox_dropped",
            "Events of this replica dropped unpublished at the outbox's bound (Redis away or "
            "refusing writes too long): their statistics are never written.",
            node.outbox.dropped_total,
        )
        if self._budget is not None:
            yield _counter(
                "kinference_tenant_budget_dropped",
                "Unsent tenant budget entries (a tenant's charges of one second, or usage of "
                "one minute) dropped at their bound while Redis was away: never charged.",
                self._budget.dropped,
            )
        applied = CounterMetricFamily(
            "kinference_cluster_events_applied",
            "Other replicas' events applied to this replica's view, by kind.",
            labels=["kind"],
        )
        totals: dict[str, int] = {}
        for shard in shards:
            for kind, count in shard.view.applied.items():
                name = _KINDS.get(kind, "other")
                totals[name] = totals.get(name, 0) + count
        for name, count in sorted(totals.items()):
            applied.add_metric([name], count)
        yield applied
        yield _counter(
            "kinference_cluster_resyncs",
            "Replicas' load re-read from their hash after a gap in their events.",
            sum(reader.resyncs for reader in readers),
        )
        yield _counter(
            "kinference_cluster_flushes",
            "Batches published to Redis (one per shard with something to send).",
            sum(shard.publisher.flushes for shard in shards),
        )


_KINDS = {"p": "pick", "r": "release", "t": "first_token", "l": "itl", "g": "engine", "b": "cooled"}


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=float(value))


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=float(value))

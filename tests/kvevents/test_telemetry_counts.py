"""Messages are counted per pool and outcome through counters bound once (h201)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from kinference.kvcache.precise import PreciseCaches
from kinference.kvevents.telemetry import PreciseMetrics


def test_each_message_counts_under_its_pool_and_outcome() -> None:
    registry = CollectorRegistry()
    metrics = PreciseMetrics(registry, PreciseCaches())
    for pool, outcome in [("a", "applied")] * 3 + [("a", "gap"), ("b", "applied")]:
        metrics.message(pool, outcome)

    def count(pool: str, outcome: str) -> float | None:
        labels = {"pool": pool, "outcome": outcome}
        return registry.get_sample_value("kinference_kv_events_messages_total", labels)

    assert count("a", "applied") == 3
    assert count("a", "gap") == 1
    assert count("b", "applied") == 1
    assert count("b", "gap") is None

"""Metrics of precise prefix mode: which workers are precise now, what the event streams did,
and what tokenizing prompts costs. Pool and endpoint labels come from the policy, never from
callers, so they are bounded by the configuration."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kinference.kvcache.precise import PreciseCaches
from kinference.kvevents.trust import Distrust

PRECISE = "precise"
STATES = (PRECISE, *(why.name.lower() for why in Distrust))
# Seconds to tokenize one prompt: ~0.1 ms for a short chat up to ~0.1 s for 1 MiB.
TOKENIZE_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


class PreciseCollector(Collector):
    """`kinference_prefix_precise_worker{pool,endpoint,state}`: 1 for each worker's current
    state (`precise`, or why not), 0 for the others; and the blocks indexed per pool."""

    def __init__(self, caches: PreciseCaches) -> None:
        self._caches = caches

    def collect(self) -> Iterator[GaugeMetricFamily]:
        workers = GaugeMetricFamily(
            "kinference_prefix_precise_worker",
            "Workers of precise-mode pools by state: 1 where the worker's prefix matches come "
            "from its KV events now (state precise) or why they do not (approximate index).",
            labels=["pool", "endpoint", "state"],
        )
        blocks = GaugeMetricFamily(
            "kinference_prefix_precise_blocks",
            "KV blocks known from engines' events, per precise pool (summed over its workers: "
            "a block two workers hold counts twice).",
            labels=["pool"],
        )
        now = self._caches.clock()
        # On the metrics server's thread, while the loop changes these: each dict copied
        # (one C call) before it is walked, and nothing written (`WorkerTrust.state`).
        for ref, caches in list(self._caches.pools.items()):
            held = caches.index.holdings().values()
            blocks.add_metric([ref], sum(len(kept) for kept, _ in held))
            for slot, trust in list(caches.trust.items()):
                why = trust.state(now)
                state = PRECISE if why is None else _state(why)
                endpoint = caches.endpoints.get(slot, str(slot))
                for name in STATES:
                    workers.add_metric([ref, endpoint, name], 1.0 if name == state else 0.0)
        yield workers
        yield blocks


def _state(why: Distrust | None) -> str:
    return (why or Distrust.AWAITING).name.lower()


class PreciseMetrics:
    """The counters and histograms; the per-worker gauges come from `PreciseCollector`."""

    def __init__(self, registry: CollectorRegistry, caches: PreciseCaches) -> None:
        self.messages = Counter(
            "kinference_kv_events_messages_total",
            "KV-event messages from engines of precise pools, by what became of them "
            "(applied, malformed, gap, replaying, restarted, block_size, lagging, overflow, "
            "replayed, replay_incomplete).",
            ["pool", "outcome"],
            registry=registry,
        )
        self.reopened = Counter(
            "kinference_kv_events_reopened_total",
            "Live KV-event sockets of precise pools reopened because ZMQ ended the connection "
            "without reconnecting (a frame over the size cap, or another protocol error).",
            ["pool"],
            registry=registry,
        )
        self.tokenize_seconds = Histogram(
            "kinference_prompt_tokenize_seconds",
            "Seconds to render, tokenize and cut one prompt into engine blocks (precise mode).",
            buckets=TOKENIZE_BUCKETS,
            registry=registry,
        )
        registry.register(PreciseCollector(caches))
        # Each (pool, outcome)'s counter, bound once: `labels` per message cost more than
        # the rest of counting it (a pool's engines send a batch per scheduler step).
        # Bounded as the labels are: by the configuration's pools and the outcomes.
        self._counted: dict[tuple[str, str], Callable[[], None]] = {}

    def message(self, pool: str, outcome: str) -> None:
        count = self._counted.get((pool, outcome))
        if count is None:
            count = self._counted[(pool, outcome)] = self.messages.labels(pool, outcome).inc
        count()

    def reopen(self, pool: str) -> None:
        self.reopened.labels(pool).inc()

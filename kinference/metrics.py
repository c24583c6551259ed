"""Prometheus collectors, built on an injected registry by the composition root."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from kinference.hostport import split_host_port
from kinference.itl_layout import EDGES_MS as ITL_LAYOUT_1_EDGES_MS

# Pick latency, seconds: the decision itself is sub-millisecond; the tail shows GC or a
# saturated event loop.
_PICK_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5)
# Precise prediction error, tokens: 0, within a 16-token block, within 2 ... blocks.
PRECISE_ERROR_BUCKETS = (0, 1, 16, 32, 64, 128, 256, 1024, 4096, 16384)
# Time to first token, seconds: tens of milliseconds for a warm prefix on an idle worker, up
# to tens of seconds for a long prompt queued behind others.
_TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """Every collector the picker exports; one instance per process, passed down."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.buffered_bytes = Gauge(
            "kinference_buffered_bytes",
            "Body bytes held now: being pushed, awaiting Pick, awaiting or in PullBody.",
            registry=registry,
        )
        self.bodies_held = Gauge(
            "kinference_bodies_held",
            "Complete bodies held now (awaiting Pick, awaiting or in PullBody).",
            registry=registry,
        )
        self.buffered_limit_bytes = Gauge(
            "kinference_buffered_limit_bytes",
            "Server-wide body budget (KINFERENCE_MAX_BUFFERED_BYTES).",
            registry=registry,
        )
        self.heap_kept_bytes = Gauge(
            "kinference_heap_kept_bytes",
            "Freed large blocks (256 KiB-4 MiB) kept mapped for reuse; idle ones are unmapped.",
            registry=registry,
        )
        self.session_streams = Gauge(
            "kinference_session_streams",
            "PickerSession streams open now (one per remote-mode gateway process).",
            registry=registry,
        )
        self.session_requests = Gauge(
            "kinference_session_requests",
            "Requests open now on PickerSession streams, from their start to their answer.",
            registry=registry,
        )
        self.pick_seconds = Histogram(
            "kinference_pick_duration_seconds",
            "Time to answer a Pick, from request to decision.",
            buckets=_PICK_BUCKETS,
            registry=registry,
        )
        self.picks = Counter(
            "kinference_picks_total",
            "Pick decisions by outcome.",
            ["outcome"],
            registry=registry,
        )
        self.rpc_errors = Counter(
            "kinference_rpc_errors_total",
            "RPCs that ended with a non-OK gRPC status, by method and code.",
            ["method", "code"],
            registry=registry,
        )
        self.bodies_reclaimed = Counter(
            "kinference_bodies_reclaimed_total",
            "Bodies released without being pulled to the end, by why.",
            ["reason"],
            registry=registry,
        )
        self.reports = Counter(
            "kinference_reports_total",
            "Reports received, by kind and whether they named a request in flight.",
            ["kind", "known"],
            registry=registry,
        )
        self.tokens = Counter(
            "kinference_tokens_total",
            "Tokens reported by ReportFinalToken, by kind (prompt, completion, cached).",
            ["kind"],
            registry=registry,
        )
        self._add_request_collectors(registry)

    def _add_request_collectors(self, registry: CollectorRegistry) -> None:
        """Per-request signals for dashboards: why picks ended as they did, latency the
        callers observed, prefix-cache predictions against what engines reported, tenants."""
        self.pick_reasons = Counter(
            "kinference_pick_reasons_total",
            "Pick decisions by outcome and reason code (a fixed set; see docs/metrics.md).",
            ["outcome", "reason"],
            registry=registry,
        )
        self.ttft = Histogram(
            "kinference_ttft_seconds",
            "Time to first token reported by callers (ReportFirstToken, status < 400).",
            ["destination"],
            buckets=_TTFT_BUCKETS,
            registry=registry,
        )
        self.itl = ItlHistogram(
            "kinference_itl_seconds",
            "Inter-token gaps reported by callers, from layout-1 bucket counts (no _sum).",
        )
        registry.register(self.itl)
        self.prefix_cached_tokens = Counter(
            "kinference_prefix_cached_tokens_total",
            "Prompt tokens served from the engine's prefix cache, as predicted at Pick "
            "and as the engine reported, over local requests that reported cached_tokens.",
            ["source"],
            registry=registry,
        )
        self.prefix_precise_error_tokens = Histogram(
            "kinference_prefix_precise_error_tokens",
            "Local requests in precise prefix mode: |cached tokens predicted from the "
            "engine's KV events - cached_tokens reported|, tokens.",
            buckets=PRECISE_ERROR_BUCKETS,
            registry=registry,
        )
        self.prefix_prompt_tokens = Counter(
            "kinference_prefix_prompt_tokens_total",
            "Prompt tokens of the local requests counted in kinference_prefix_cached_tokens.",
            registry=registry,
        )
        self.tenant_tokens = Counter(
            "kinference_tenant_tokens_total",
            "Tokens reported by ReportFinalToken per tenant (capped; the rest is '(other)').",
            ["tenant", "kind"],
            registry=registry,
        )

    def watch_buffers(
        self, limit: int, used: Callable[[], float], held: Callable[[], float]
    ) -> None:
        """Read buffer gauges at scrape time, so the hot path never touches them."""
        self.buffered_limit_bytes.set(limit)
        self.buffered_bytes.set_function(used)
        self.bodies_held.set_function(held)

    def watch_heap(self, kept: Callable[[], float]) -> None:
        """The large blocks' cache (kinference.heap), read at scrape time."""
        self.heap_kept_bytes.set_function(kept)

    def watch_sessions(self, streams: Callable[[], float], requests: Callable[[], float]) -> None:
        """PickerSession gauges, read at scrape time."""
        self.session_streams.set_function(streams)
        self.session_requests.set_function(requests)

    def watch_providers(
        self, active: Callable[[], Mapping[str, Any]], now: Callable[[], float]
    ) -> None:
        """Export provider cool-downs, read at scrape time."""
        self.registry.register(_ProviderCollector(active, now))

    def watch_inflight(
        self, per_endpoint: Callable[[], Mapping[str, int]], own: Callable[[], Mapping[str, int]]
    ) -> None:
        """Export in-flight requests per endpoint (cluster-wide and this instance's), read
        at scrape time."""
        self.registry.register(_InflightCollector(per_endpoint, own))


def serve_metrics(listen: str, registry: CollectorRegistry) -> Any:
    """Serve `registry` as Prometheus text on `listen` ("host:port"; empty: not served).
    Returns the HTTP server (`server_port`, `shutdown`), or None."""
    if not listen:
        return None
    host, port = split_host_port(listen)
    server, _thread = start_http_server(port, host, registry=registry)
    return server


class _InflightCollector(Collector):
    def __init__(
        self, per_endpoint: Callable[[], Mapping[str, int]], own: Callable[[], Mapping[str, int]]
    ) -> None:
        self._per_endpoint = per_endpoint
        self._own = own

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield _per_endpoint(
            "kinference_inflight_requests",
            "Requests picked for an endpoint and not yet finished, cluster-wide (as scored).",
            self._per_endpoint(),
        )
        yield _per_endpoint(
            "kinference_inflight_requests_own",
            "Requests this instance picked for an endpoint and not yet finished.",
            self._own(),
        )


def _per_endpoint(name: str, documentation: str, counts: Mapping[str, int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=["endpoint"])
    for endpoint, count in sorted(counts.items()):
        family.add_metric([endpoint], count)
    return family


class _ProviderCollector(Collector):
    """Providers cooling down now, with the seconds left (one series per cooled provider)."""

    def __init__(self, active: Callable[[], Mapping[str, Any]], now: Callable[[], float]) -> None:
        self._active = active
        self._now = now

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "kinference_provider_cooldown_seconds",
            "Seconds a provider stays cooled down (skipped), by provider and reason.",
            labels=["provider", "reason"],
        )
        listed = GaugeMetricFamily(
            "kinference_provider_blacklisted",
            "1 per provider blacklisted now (shared across replicas through Redis), by reason.",
            labels=["provider", "reason"],
        )
        now = self._now()
        for ref, cooldown in sorted(self._active().items()):
            family.add_metric([ref, cooldown.reason], max(cooldown.until - now, 0.0))
            listed.add_metric([ref, cooldown.reason], 1.0)
        yield family
        yield listed


class ItlHistogram(Collector):
    """A Prometheus histogram fed whole layout-1 bucket counts (the spec's ITL report).

    prometheus_client's Histogram observes one value at a time; callers report counts per
    bucket, so they are summed here and exported cumulatively, in seconds. The gaps' sum is
    unknown, so there is no `_sum` (nor `_count`: the `+Inf` bucket is the count).
    """

    def __init__(self, name: str, documentation: str) -> None:
        self._name = name
        self._documentation = documentation
        self._counts = [0] * (len(ITL_LAYOUT_1_EDGES_MS) + 1)

    def add(self, counts: Sequence[int]) -> None:
        """Add one report's 15 bucket counts (the caller checked the layout)."""
        for index, count in enumerate(counts):
            self._counts[index] += count

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self._name, self._documentation)
        edges = [repr(edge / 1000) for edge in ITL_LAYOUT_1_EDGES_MS] + ["+Inf"]
        cumulative = list(itertools.accumulate(self._counts))
        family.add_metric([], list(zip(edges, cumulative, strict=True)), None)
        yield family

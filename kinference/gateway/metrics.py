"""The gateway's Prometheus metrics: requests by route, model and status; TTFT, ITL, tokens.

Every label value is bounded: `route` is one of the inference routes (kinference.gateway.
routes) or `other`; `model` is a name the picker dispatched (so one the policy serves), at
most `MAX_MODELS` of them, else `other`; `status` is the HTTP status sent. Children are
bound once per label set, since a `labels()` lookup costs microseconds on every request.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from kinference import itl_layout
from kinference.config.fields import MAX_MODEL_CHARS
from kinference.gateway.capacity import ConnectionCap
from kinference.gateway.timing import TokenClock
from kinference.gateway.usage import Usage

MAX_MODELS = 100  # distinct model label values; later ones are counted as `other`
OTHER = "other"
# Time to first token and whole-request duration, seconds: a few ms for a cached short
# prompt on an idle engine, up to minutes for a long generation.
_SECONDS_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)


class ModelLabels:
    """Model names as label values, bounded in number."""

    def __init__(self, limit: int = MAX_MODELS) -> None:
        self._limit = limit
        self._known: set[str] = set()

    def label(self, model: str, dispatched: bool) -> str:
        if not model:
            return "none"
        if model in self._known:
            return model
        if dispatched and len(self._known) < self._limit and len(model) <= MAX_MODEL_CHARS:
            self._known.add(model)
            return model
        return OTHER


class LabelledItl(Collector):
    """Inter-token gaps per model, fed whole per-request bucket counts (layout 1)."""

    def __init__(self, name: str, documentation: str) -> None:
        self._name = name
        self._documentation = documentation
        self._counts: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}

    def add(self, model: str, counts: list[int], total_s: float) -> None:
        held = self._counts.get(model)
        if held is None:
            self._counts[model] = list(counts)
            self._sums[model] = total_s
            return
        self._counts[model] = [have + count for have, count in zip(held, counts, strict=True)]
        self._sums[model] += total_s

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self._name, self._documentation, labels=["model"])
        edges = [repr(edge / 1000) for edge in itl_layout.EDGES_MS] + ["+Inf"]
        for model, counts in sorted(self._counts.items()):
            cumulative = list(itertools.accumulate(counts))
            family.add_metric([model], list(zip(edges, cumulative, strict=True)), self._sums[model])
        yield family


class GatewayMetrics:
    """Every collector of the gateway; built on the registry the composition root passes."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.models = ModelLabels()
        self.requests = Counter(
            "kinference_gateway_requests",
            "HTTP requests answered, by route, model and status sent.",
            ["route", "model", "status"],
            registry=registry,
        )
        self.duration = Histogram(
            "kinference_gateway_request_duration_seconds",
            "From the request's arrival to its last response byte, by route.",
            ["route"],
            buckets=_SECONDS_BUCKETS,
            registry=registry,
        )
        self.ttft = Histogram(
            "kinference_gateway_ttft_seconds",
            "Time to first token seen by the gateway (upstream dispatch to first content).",
            ["route", "model"],
            buckets=_SECONDS_BUCKETS,
            registry=registry,
        )
        self.itl = LabelledItl(
            "kinference_gateway_itl_seconds", "Gaps between content events of streams."
        )
        registry.register(self.itl)
        self.tokens = Counter(
            "kinference_gateway_tokens",
            "Tokens of completed responses (usage as the upstream reported it, or counted).",
            ["model", "kind"],
            registry=registry,
        )
        self.connections = Gauge(
            "kinference_gateway_client_connections",
            "Client connections served now (refused ones not counted).",
            registry=registry,
        )
        self.refused = Counter(
            "kinference_gateway_connections_refused",
            "Client connections refused at once, by reason (max_client_connections: past "
            "KINFERENCE_GATEWAY_MAX_CLIENT_CONNECTIONS).",
            ["reason"],
            registry=registry,
        )
        self._over_cap = self.refused.labels("max_client_connections")  # its series from 0
        # Children bound once per label set: a `labels()` lookup costs about 5 µs.
        self._answers: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}
        self._relays: dict[tuple[str, str], tuple[Histogram, Counter, Counter]] = {}

    def connection_cap(self, limit: int, *, linger_max: int | None = None) -> ConnectionCap:
        """A cap of `limit` client connections whose count and refusals are these metrics'."""
        cap = ConnectionCap(limit, self._over_cap.inc, linger_max=linger_max)
        self.connections.set_function(lambda: cap.open)
        return cap

    def answered(self, route: str, model: str, status: int, seconds: float) -> None:
        """A request that ended without a relayed response (an error of the gateway's)."""
        key = (route, model, status)
        children = self._answers.get(key)
        if children is None:
            children = self._answers[key] = (
                self.requests.labels(route, model, str(status)),
                self.duration.labels(route),
            )
        children[0].inc()
        children[1].observe(seconds)

    def relayed(
        self, route: str, model: str, status: int, seconds: float, *, usage: Usage | None,
        clock: TokenClock,
    ) -> None:  # fmt: skip
        """A relayed response that ended (completely or not)."""
        self.answered(route, model, status, seconds)
        children = self._relays.get((route, model))
        if children is None:
            children = self._relays[route, model] = (
                self.ttft.labels(route, model),
                self.tokens.labels(model, "prompt"),
                self.tokens.labels(model, "completion"),
            )
        ttft, prompt, completion = children
        if clock.ttft_ms is not None and status < 400:
            ttft.observe(clock.ttft_ms / 1000.0)
        counts = clock.itl_bucket_counts
        if counts:
            self.itl.add(model, counts, clock.gap_sum_s)
        if usage is not None:
            prompt.inc(usage.prompt_tokens)
            completion.inc(usage.completion_tokens)

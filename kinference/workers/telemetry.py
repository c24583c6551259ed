"""Prometheus collectors for the engine scraper, on the registry the caller injects.

No per-endpoint label: a cluster may have hundreds of workers that come and go, and the
picker's own metrics must stay bounded. Which endpoint fails is in the logs.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Scrape duration, seconds: a healthy engine answers in a few milliseconds; the top buckets
# show a loaded event loop in the engine's API server, or scrapes that hit the timeout.
_SCRAPE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class ScrapeResult(enum.Enum):
    OK = "ok"
    ERROR = "error"  # refused, reset, HTTP status >= 400, page too large
    TIMEOUT = "timeout"  # no complete page within the scrape timeout


class ScrapeMetrics:
    """The scraper's collectors: scrapes by result, scrape latency, ready workers."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._scrapes = Counter(
            "kinference_engine_scrapes",  # exported as kinference_engine_scrapes_total
            "Engine /metrics scrapes by result (ok, error, timeout).",
            ["result"],
            registry=registry,
        )
        for result in ScrapeResult:  # export every result from the start, at zero
            self._scrapes.labels(result.value)
        self._seconds = Histogram(
            "kinference_engine_scrape_seconds",
            "Time for one engine /metrics scrape, successful or not.",
            buckets=_SCRAPE_BUCKETS,
            registry=registry,
        )
        self._ready = Gauge(
            "kinference_engine_ready_workers",
            "Scraped endpoints currently ready (fewer consecutive failures than the limit).",
            registry=registry,
        )

    def observe(self, result: ScrapeResult, seconds: float) -> None:
        self._scrapes.labels(result.value).inc()
        self._seconds.observe(max(seconds, 0.0))

    def watch_ready(self, count: Callable[[], float]) -> None:
        """Read the ready count at collection time, so scrapes never touch the gauge."""
        self._ready.set_function(count)

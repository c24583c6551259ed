"""The routing core's own state as metrics, read at scrape time (nothing on the Pick path).

- per plugin: calls and CPU seconds (`kinference_routing_plugin_*`), so each filter's and
  scorer's cost is measurable in production;
- per worker and model: the TTFT model's terms, the rates it learned and the prefix
  index's capacity estimate (labels: pool endpoints and models, bounded by the policy);
- per model: the rates learned of the model's engines together (the busy cost a running
  sequence adds to a TTFT; models of the policy's pools only, never a caller's name);
- prediction quality over the last window: TTFT (predicted vs reported) and cached tokens
  (predicted vs reported), as mean absolute error, bias and correlation.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kinference.routing.quality import ErrorWindow
from kinference.routing.router import Router

_RATES = ("prefill_ms_per_token", "prefill_base_ms", "service_ms")


class RoutingCollector(Collector):
    def __init__(self, router: Router) -> None:
        self._router = router

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield from self._plugins()
        yield from self._workers()
        yield from self._models()
        yield from self._quality()

    def _plugins(self) -> Iterator[CounterMetricFamily]:
        costs = self._router.costs
        calls = CounterMetricFamily(
            "kinference_routing_plugin_calls", "Calls of each routing plugin.", labels=["plugin"]
        )
        seconds = CounterMetricFamily(
            "kinference_routing_plugin_seconds",
            "CPU time spent in each routing plugin.",
            labels=["plugin"],
        )
        for name, count in costs.calls.items():
            calls.add_metric([name], count)
            seconds.add_metric([name], costs.nanoseconds.get(name, 0) / 1e9)
        yield calls
        yield seconds

    def _workers(self) -> Iterator[GaugeMetricFamily]:
        router = self._router
        policy, table = router.policy, router.table
        wait = _family(
            "kinference_worker_estimated_wait_ms",
            "Estimated ms a request would wait behind others on the worker.",
        )
        learned = GaugeMetricFamily(
            "kinference_worker_learned_rate",
            "TTFT model rates learned per worker and model (NaN: prior in use).",
            labels=["endpoint", "model", "rate"],
        )
        pending = GaugeMetricFamily(
            "kinference_worker_pending_prefill_tokens",
            "Uncached prompt tokens picked to the worker, awaiting their first token.",
            labels=["endpoint"],
        )
        capacity = GaugeMetricFamily(
            "kinference_prefix_capacity_blocks",
            "Prefix blocks the index keeps for the worker, and which estimate bounds them "
            "(source): the LRU bound, the KV-cache size its engine publishes (engine), or "
            "less once it reported fewer cached tokens than predicted (learned).",
            labels=["endpoint", "source"],
        )
        waiting, _ = table.engine_signals(router.now(), policy.engine_stale_after_s)
        for pool in policy.catalog.pools:
            for model in pool.models:
                slots = policy.catalog.slots(pool.ref, model)
                if slots is None or not len(slots):
                    continue
                parts = policy.ttft.parts(table, slots, model, waiting)
                for i, slot in enumerate(slots.tolist()):
                    endpoint = table.endpoints[slot]
                    wait.add_metric([endpoint, model], float(parts.wait[i]))
                    for rate in _RATES:
                        value = router.learning.rates.learned(model, rate, slot)
                        learned.add_metric([endpoint, model, rate], value)
        for slot, endpoint in enumerate(table.endpoints):
            if not endpoint:  # a freed slot (`routing.slots`)
                continue
            pending.add_metric([endpoint], float(table.pending_prefill[slot]))
            prefix, bound = router.prefix, router.prefix.blocks_per_worker
            source = prefix.source(slot).value
            capacity.add_metric([endpoint, source], min(prefix.capacity.get(slot, bound), bound))
        yield from (wait, learned, pending, capacity)

    def _models(self) -> Iterator[GaugeMetricFamily]:
        router = self._router
        family = GaugeMetricFamily(
            "kinference_model_learned_rate",
            "TTFT model rates learned per model, its engines together (NaN: prior in use).",
            labels=["model", "rate"],
        )
        models = {model for pool in router.policy.catalog.pools for model in pool.models}
        for model in sorted(models):
            busy = router.learning.rates.learned_busy(model)
            family.add_metric([model, "busy_ms_per_sequence"], busy)
        yield family

    def _quality(self) -> Iterator[GaugeMetricFamily]:
        quality = self._router.learning.quality
        family = GaugeMetricFamily(
            "kinference_prediction_quality",
            "Predicted vs observed over the last window: mae, bias (predicted - observed), "
            "correlation and count, for ttft_ms and cached_tokens.",
            labels=["signal", "stat"],
        )
        windows: dict[str, ErrorWindow] = {
            "ttft_ms": quality.ttft_ms,
            "cached_tokens": quality.cached_tokens,
        }
        for signal, window in windows.items():
            summary = window.summary()
            family.add_metric([signal, "count"], summary.count)
            for stat, value in (
                ("mae", summary.mean_abs_error),
                ("bias", summary.bias),
                ("correlation", summary.correlation),
            ):
                family.add_metric([signal, stat], value)
        yield family


def _family(name: str, documentation: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=["endpoint", "model"])

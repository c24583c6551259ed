"""The engine's `/metrics` page, under vLLM's metric names, and its totals for `stats()`.

Names, label names and histogram buckets follow vLLM's v1 `PrometheusStatLogger`
(`vllm/v1/metrics/loggers.py`), so scrapers written for vLLM read a simulated engine
unchanged. Every series carries `model_name` and `engine` (vLLM's data-parallel rank,
always "0" here), but for `vllm:cache_config_info`, vLLM's info gauge of its cache
configuration (set to 1; labels `block_size` in tokens, `num_gpu_blocks`, `engine`, as
vLLM's `log_metrics_info` writes a subset of them). Gauges are read live from the scheduler
at scrape time. Counters count
tokens, except `request_success` (requests, by `finished_reason`).

TTFT is measured on the event loop's clock, from arrival to first token, so it includes
the queue. Inter-token latency records the gaps the cost model set (model seconds times
the time scale), not measured ones: what the engine meant, free of the noise of a busy
test machine. It is observed per token, so it is a plain histogram of our own (one
bisect per decode step) rather than a `prometheus_client` one (a locked call per token).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from loadtest.sim_engine.scheduler import Job, Scheduler

TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
_LABELS = ("model_name", "engine")
_ENGINE = "0"
_ITL = "vllm:inter_token_latency_seconds"


@dataclass(frozen=True, slots=True)
class _ModelSeries:
    """One model's labelled children, looked up once (`labels()` costs a lock and a dict)."""

    prompt: Counter
    generation: Counter
    queries: Counter
    hits: Counter
    ttft: Histogram


class _TokenGaps:
    """A histogram of inter-token gaps per model that takes a count with each value."""

    def __init__(self, models: tuple[str, ...]) -> None:
        self._counts = {model: [0] * (len(ITL_BUCKETS) + 1) for model in models}
        self._sums = dict.fromkeys(models, 0.0)

    def observe(self, model: str, gap_s: float, tokens: int) -> None:
        self._counts[model][bisect_left(ITL_BUCKETS, gap_s)] += tokens  # le is inclusive
        self._sums[model] += gap_s * tokens

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(_ITL, "Inter-token latency.", labels=_LABELS)
        edges = [*map(floatToGoString, ITL_BUCKETS), "+Inf"]
        for model, counts in self._counts.items():
            running, buckets = 0, []
            for edge, count in zip(edges, counts, strict=True):
                running += count
                buckets.append((edge, float(running)))
            family.add_metric([model, _ENGINE], buckets, self._sums[model])
        yield family


class SimMetrics:
    """Prometheus collectors on the engine's own registry, plus exact totals."""

    def __init__(self, models: tuple[str, ...]) -> None:
        self.registry = CollectorRegistry()
        self.requests = 0  # scheduled (admitted to the batch)
        self.finished_requests = 0  # generated every token
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.completion_tokens = 0
        self._models = models
        self._success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            (*_LABELS, "finished_reason"),
            registry=self.registry,
        )
        prompt = self._counter("vllm:prompt_tokens", "Prefill tokens processed.")
        generation = self._counter("vllm:generation_tokens", "Generation tokens processed.")
        queries = self._counter("vllm:prefix_cache_queries", "Prefix-cache queries, in tokens.")
        hits = self._counter("vllm:prefix_cache_hits", "Prefix-cache hits, in tokens.")
        ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Time to first token.",
            _LABELS,
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self._series = {
            model: _ModelSeries(
                prompt=prompt.labels(model, _ENGINE),
                generation=generation.labels(model, _ENGINE),
                queries=queries.labels(model, _ENGINE),
                hits=hits.labels(model, _ENGINE),
                ttft=ttft.labels(model, _ENGINE),
            )
            for model in models
        }
        self._gaps = _TokenGaps(models)
        self.registry.register(self._gaps)

    def watch(self, scheduler: Scheduler) -> None:
        """Read the running, waiting and KV-cache gauges from `scheduler` at every scrape."""
        running = self._gauge("vllm:num_requests_running", "Requests in the running batch.")
        waiting = self._gauge("vllm:num_requests_waiting", "Requests waiting.")
        usage = self._gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 1 = 100%.")
        for model in self._models:
            running.labels(model, _ENGINE).set_function(partial(scheduler.running_for, model))
            waiting.labels(model, _ENGINE).set_function(partial(scheduler.waiting_for, model))
            usage.labels(model, _ENGINE).set_function(lambda: scheduler.kv_usage)
        self._cache_config(scheduler)

    def _cache_config(self, scheduler: Scheduler) -> None:
        """vLLM's `vllm:cache_config_info` of the engine's prefix cache: its blocks of
        `block_chars` characters hold `block_chars / chars_per_token` tokens each."""
        engine = scheduler.engine
        block_size = engine.block_chars / engine.chars_per_token
        labels = {
            "block_size": str(int(block_size)) if block_size.is_integer() else str(block_size),
            "num_gpu_blocks": str(engine.capacity_blocks),
            "engine": _ENGINE,
        }
        info = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            tuple(labels),
            registry=self.registry,
        )
        info.labels(**labels).set(1)

    def page(self) -> bytes:
        return generate_latest(self.registry)

    # -- Observer --------------------------------------------------------------------------

    def scheduled(self, job: Job) -> None:
        assert job.admission is not None
        prompt, cached = job.admission.prompt_tokens, job.admission.cached_tokens
        self.requests += 1
        self.prompt_tokens += prompt
        self.cached_tokens += cached
        series = self._series[job.model]
        series.prompt.inc(prompt)
        series.queries.inc(prompt)
        series.hits.inc(cached)

    def first_token(self, job: Job, ttft_s: float) -> None:
        self._series[job.model].ttft.observe(ttft_s)
        self._generated(job, 1)

    def decoded(self, job: Job, gap_s: float, tokens: int) -> None:
        self._gaps.observe(job.model, gap_s, tokens)
        self._generated(job, tokens)

    def finished(self, job: Job) -> None:
        self.finished_requests += 1
        self._success.labels(job.model, _ENGINE, job.finish_reason).inc()

    def _generated(self, job: Job, tokens: int) -> None:
        self.completion_tokens += tokens
        self._series[job.model].generation.inc(tokens)

    def _counter(self, name: str, doc: str) -> Counter:
        return Counter(name, doc, _LABELS, registry=self.registry)

    def _gauge(self, name: str, doc: str) -> Gauge:
        return Gauge(name, doc, _LABELS, registry=self.registry)

"""Which Prometheus series give an engine's queue, batch, KV-cache and LoRA state.

Each engine kind names its series differently; this module is the one place that knows the
names. A quantity may list several series: the first one present on the page wins, which
covers renames across engine versions and the two ways TensorRT-LLM is served.

Sources (checked when this table was written):

- vLLM: `vllm/v1/metrics/loggers.py` (vllm-project/vllm, `PrometheusStatLogger`):
  `vllm:num_requests_waiting`, `vllm:num_requests_running`, `vllm:kv_cache_usage_perc`
  (a fraction 0..1 despite the name; before 0.9 it was `vllm:gpu_cache_usage_perc`, kept
  until 0.10 as a deprecated twin), and `vllm:lora_requests_info`, a gauge set to the current
  Unix time whose labels `running_lora_adapters` / `waiting_lora_adapters` are adapter names
  joined by "," and `max_lora` the adapter slots. Every label combination ever seen stays on
  the page, so the newest one is the sample with the highest value. Labels on the others:
  `model_name` and `engine` (the data-parallel rank).
- SGLang: `sglang:num_queue_reqs`, `sglang:num_running_reqs`, `sglang:token_usage` (fraction
  0..1), as listed for SGLang in the Gateway API Inference Extension's model-server metric
  protocol and in llm-d-router's built-in engine configs (`defaultEngineConfigs`).
- TensorRT-LLM, two servers:
  - trtllm-serve (`tensorrt_llm/metrics/collector.py`, NVIDIA/TensorRT-LLM):
    `trtllm_num_requests_waiting` (numQueuedRequests), `trtllm_num_requests_running`
    (numActiveRequests), `trtllm_kv_cache_utilization` (usedNumBlocks / maxNumBlocks, 0..1).
    They are served at `/prometheus/metrics` and only with `return_perf_metrics` enabled
    (`tensorrt_llm/serve/openai_server.py`, `mount_metrics`); trtllm-serve's `/metrics` is JSON
    iteration stats, not Prometheus text.
  - Triton with the TensorRT-LLM backend (`custom_metrics_reporter.cc`, Triton's `/metrics`,
    usually on port 8002): `nv_trt_llm_request_metrics{request_type="waiting"}`,
    `nv_trt_llm_request_metrics{request_type="active"}` and
    `nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}`. We read "active" as
    running because it is the same numActiveRequests trtllm-serve exports; llm-d-router's
    `triton-tensorrt-llm` config uses "scheduled" (this iteration's batch) instead.
  TRT-LLM exports no LoRA adapter series.

KV-cache size (`kv_capacity`: tokens = blocks x tokens a block; read by
`kinference.workers.capacity`), where the engine publishes it:

- vLLM: the info gauge `vllm:cache_config_info` (`log_metrics_info("cache_config", ...)`
  in `vllm/v1/metrics/loggers.py`), one sample per data-parallel rank (`engine` label), set
  to 1, labelled with every `CacheConfig` field as `str(value)` (`metrics_info` in
  `vllm/config/cache.py`): `num_gpu_blocks` ("None" until profiled) and `block_size`
  (tokens); since `kv_cache_size_tokens` exists it is the capacity in tokens, group-aware
  (hybrid models), and is preferred.
- SGLang: `sglang:max_total_num_tokens` (`SchedulerMetricsCollector`,
  `python/sglang/srt/metrics/collector.py`), the KV pool's size in tokens.
- trtllm-serve: `trtllm_kv_cache_max_blocks` x `trtllm_kv_cache_tokens_per_block`
  (`MetricsCollector`, `tensorrt_llm/metrics/collector.py`); Triton:
  `nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max"}` x `{..="tokens_per"}`
  (`custom_metrics_reporter.cc`).
- Dynamo's mocker (1.6.1) serves no such series (its page was read: `vllm:` load gauges
  and `dynamo_*` counters only); its capacity stays unknown.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


class EngineKind(enum.StrEnum):
    """Model servers whose `/metrics` the picker understands (the policy's `engine`)."""

    VLLM = "vllm"
    SGLANG = "sglang"
    TRTLLM = "trtllm"


@dataclass(frozen=True, slots=True)
class Series:
    """One gauge on a metrics page: its name and the label values a sample must carry."""

    name: str
    where: tuple[tuple[str, str], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.where)


@dataclass(frozen=True, slots=True)
class InfoLabel:
    """A number carried by a label of an info gauge (the newest sample's)."""

    name: str
    label: str


@dataclass(frozen=True, slots=True)
class KvCapacity:
    """Where one engine kind says how many tokens its KV cache holds: `blocks` times
    `per_block` tokens, or `blocks` alone when it counts tokens (`per_block` None)."""

    blocks: Series | InfoLabel
    per_block: Series | InfoLabel | None = None

    @property
    def names(self) -> tuple[str, ...]:
        parts = (self.blocks,) if self.per_block is None else (self.blocks, self.per_block)
        return tuple(part.name for part in parts)


@dataclass(frozen=True, slots=True)
class EngineMetrics:
    """The series one engine kind exposes for each quantity the picker reads.

    `waiting`, `running` and `kv_usage` list alternatives, most preferred first; `lora_info`
    is a vLLM-style adapter info gauge, or None when the engine reports no adapters.
    """

    kind: EngineKind
    metrics_path: str  # where the engine serves Prometheus text by default
    waiting: tuple[Series, ...]
    running: tuple[Series, ...]
    kv_usage: tuple[Series, ...]
    lora_info: str | None = None
    kv_capacity: tuple[KvCapacity, ...] = ()  # alternatives, the first one read wins

    @property
    def names(self) -> frozenset[str]:
        """Every metric name the parser must pick out of a page for this engine."""
        series = (*self.waiting, *self.running, *self.kv_usage)
        extra = () if self.lora_info is None else (self.lora_info,)
        sizes = (name for capacity in self.kv_capacity for name in capacity.names)
        return frozenset((*(s.name for s in series), *extra, *sizes))


def _triton(family: str, label: str, value: str) -> Series:
    return Series(family, ((label, value),))


_VLLM_CACHE = "vllm:cache_config_info"
_TRITON_KV = "nv_trt_llm_kv_cache_block_metrics"

_VLLM = EngineMetrics(
    kind=EngineKind.VLLM,
    metrics_path="/metrics",
    waiting=(Series("vllm:num_requests_waiting"),),
    running=(Series("vllm:num_requests_running"),),
    kv_usage=(Series("vllm:kv_cache_usage_perc"), Series("vllm:gpu_cache_usage_perc")),
    lora_info="vllm:lora_requests_info",
    kv_capacity=(
        KvCapacity(InfoLabel(_VLLM_CACHE, "kv_cache_size_tokens")),
        KvCapacity(InfoLabel(_VLLM_CACHE, "num_gpu_blocks"), InfoLabel(_VLLM_CACHE, "block_size")),
    ),
)

_SGLANG = EngineMetrics(
    kind=EngineKind.SGLANG,
    metrics_path="/metrics",
    waiting=(Series("sglang:num_queue_reqs"),),
    running=(Series("sglang:num_running_reqs"),),
    kv_usage=(Series("sglang:token_usage"),),
    kv_capacity=(KvCapacity(Series("sglang:max_total_num_tokens")),),
)

_TRTLLM = EngineMetrics(
    kind=EngineKind.TRTLLM,
    metrics_path="/prometheus/metrics",  # trtllm-serve; Triton serves `/metrics` on its own port
    waiting=(
        Series("trtllm_num_requests_waiting"),
        _triton("nv_trt_llm_request_metrics", "request_type", "waiting"),
    ),
    running=(
        Series("trtllm_num_requests_running"),
        _triton("nv_trt_llm_request_metrics", "request_type", "active"),
    ),
    kv_usage=(
        Series("trtllm_kv_cache_utilization"),
        _triton(_TRITON_KV, "kv_cache_block_type", "fraction"),
    ),
    kv_capacity=(
        KvCapacity(
            Series("trtllm_kv_cache_max_blocks"), Series("trtllm_kv_cache_tokens_per_block")
        ),
        KvCapacity(
            _triton(_TRITON_KV, "kv_cache_block_type", "max"),
            _triton(_TRITON_KV, "kv_cache_block_type", "tokens_per"),
        ),
    ),
)

# Read-only: the table is data, not state.
_BY_KIND: Mapping[EngineKind, EngineMetrics] = MappingProxyType(
    {spec.kind: spec for spec in (_VLLM, _SGLANG, _TRTLLM)}
)


def engine_metrics(kind: EngineKind | str) -> EngineMetrics:
    """The series table for an engine kind; ValueError names the kinds known."""
    try:
        return _BY_KIND[EngineKind(kind)]
    except ValueError:
        known = ", ".join(k.value for k in EngineKind)
        raise ValueError(f"unknown engine {kind!r}; expected one of {known}") from None

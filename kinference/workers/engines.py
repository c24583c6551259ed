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

    @property
    def names(self) -> frozenset[str]:
        """Every metric name the parser must pick out of a page for this engine."""
        series = (*self.waiting, *self.running, *self.kv_usage)
        extra = () if self.lora_info is None else (self.lora_info,)
        return frozenset((*(s.name for s in series), *extra))


def _triton(family: str, label: str, value: str) -> Series:
    return Series(family, ((label, value),))


_VLLM = EngineMetrics(
    kind=EngineKind.VLLM,
    metrics_path="/metrics",
    waiting=(Series("vllm:num_requests_waiting"),),
    running=(Series("vllm:num_requests_running"),),
    kv_usage=(Series("vllm:kv_cache_usage_perc"), Series("vllm:gpu_cache_usage_perc")),
    lora_info="vllm:lora_requests_info",
)

_SGLANG = EngineMetrics(
    kind=EngineKind.SGLANG,
    metrics_path="/metrics",
    waiting=(Series("sglang:num_queue_reqs"),),
    running=(Series("sglang:num_running_reqs"),),
    kv_usage=(Series("sglang:token_usage"),),
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
        _triton("nv_trt_llm_kv_cache_block_metrics", "kv_cache_block_type", "fraction"),
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

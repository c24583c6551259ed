"""From a metrics page to what the picker needs to know about one engine.

One endpoint usually runs one engine for one model, but a page may carry several samples
of a gauge: vLLM labels each data-parallel rank (`engine="0"`, `"1"`, ...), SGLang may label
ranks too, and an endpoint could front more than one model. Requests are counted across
all of them (sum): they share the endpoint's queue and GPUs from the picker's point of view.
KV-cache use is a fraction per engine, so summing would exceed 1; the fullest engine is
reported (max), since it is the one that starts preempting or queueing first.
Non-finite samples (NaN, ±Inf) are ignored; a quantity with no usable sample is unknown.
The KV cache's size in tokens is read where the engine publishes it (`capacity`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from kinference.config.pools import MAX_ENGINE_REQUESTS
from kinference.workers.capacity import read_kv_capacity
from kinference.workers.engines import EngineMetrics, Series
from kinference.workers.parse import Sample, iter_samples, newest_sample


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """An engine's state as of one scrape. A None field is unknown: the page did not say.

    `lora_adapters` holds the adapters the engine has loaded or is loading for queued
    requests (vLLM's running and waiting lists); None means the engine reports no adapter
    information at all, as opposed to an empty set, which means none are loaded.
    """

    waiting: int | None  # requests queued, not yet scheduled
    running: int | None  # requests in the running batch
    kv_usage: float | None  # fraction of KV-cache blocks in use, 0..1
    lora_adapters: frozenset[str] | None
    scraped_at: float  # scraper clock, seconds, when the page arrived
    max_lora: int | None = None  # adapter slots on the GPU (vLLM `max_lora`)
    kv_capacity_tokens: int | None = None  # tokens its KV cache holds, where it says


def read_snapshot(text: str, spec: EngineMetrics, scraped_at: float) -> EngineSnapshot:
    """Read one engine's gauges from its metrics page text."""
    adapters, max_lora = _lora(text, spec.lora_info)
    return EngineSnapshot(
        waiting=bounded_count(_values(text, spec.waiting)),
        running=bounded_count(_values(text, spec.running)),
        kv_usage=bounded_fraction(_values(text, spec.kv_usage)),
        lora_adapters=adapters,
        scraped_at=scraped_at,
        max_lora=max_lora,
        kv_capacity_tokens=read_kv_capacity(text, spec.kv_capacity),
    )


def _values(text: str, alternatives: Iterable[Series]) -> list[float]:
    """Finite values of the first series present on the page (later ones are fallbacks,
    scanned only when the earlier are absent)."""
    for series in alternatives:
        samples = [s for s in iter_samples(text, series.name) if series.matches(s.labels)]
        if samples:
            return [s.value for s in samples if math.isfinite(s.value)]
    return []


def bounded_count(values: Iterable[float]) -> int | None:
    """The finite values' sum as a count, at most `MAX_ENGINE_REQUESTS` (clamped before
    rounding: finite values can still sum to infinity); None when none is finite. Also what
    another replica's copy of a reading is held to (`ClusterView.engine_reading`)."""
    finite = [value for value in values if math.isfinite(value)]
    return round(min(max(sum(finite), 0.0), MAX_ENGINE_REQUESTS)) if finite else None


def bounded_fraction(values: Iterable[float]) -> float | None:
    """The largest finite value within [0, 1]; None when none is finite."""
    finite = [value for value in values if math.isfinite(value)]
    return min(max(*finite, 0.0), 1.0) if finite else None


def _lora(text: str, info: str | None) -> tuple[frozenset[str] | None, int | None]:
    """Adapters named by the newest LoRA info sample, and the adapter slots."""
    sample = None if info is None else newest_sample(text, info)
    if sample is None:
        return None, None
    names = (
        *_adapter_names(sample, "running_lora_adapters"),
        *_adapter_names(sample, "waiting_lora_adapters"),
    )
    return frozenset(names), _int_label(sample, "max_lora")


def _adapter_names(sample: Sample, label: str) -> list[str]:
    # vLLM joins with "," and no blanks; the GIE protocol's examples put a blank after it.
    return [name.strip() for name in sample.labels.get(label, "").split(",") if name.strip()]


def _int_label(sample: Sample, label: str) -> int | None:
    try:
        return int(sample.labels[label])
    except (KeyError, ValueError):
        return None

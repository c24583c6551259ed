"""Metrics pages for tests and the parser benchmark.

`vllm_page` renders a realistic vLLM `/metrics` page through `prometheus_client` itself
(the library vLLM uses), so its text is exactly what a real engine sends: per-engine
histograms, HTTP histograms per handler, and a history of LoRA info label sets.
`random_page` renders arbitrary families with awkward label values for the equivalence
test. The small `*_text` builders write the three engines' gauges by hand for the fake
engine server.
"""

from __future__ import annotations

import math
import random
import string
from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# vLLM's own bucket lists (vllm/v1/metrics/loggers.py), so the page has its real shape.
_LATENCY = (0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960)
_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
_TPOT = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
_TOKENS = tuple(m * 10**e for e in range(6) for m in (1, 2, 5) if m * 10**e <= 131072)
_HTTP = tuple(round(0.01 * 1.5**i, 4) for i in range(30))

_HISTOGRAMS: dict[str, tuple[float, ...]] = {
    "vllm:time_to_first_token_seconds": _TTFT,
    "vllm:time_per_output_token_seconds": _TPOT,
    "vllm:inter_token_latency_seconds": _TPOT,
    "vllm:e2e_request_latency_seconds": _LATENCY,
    "vllm:request_queue_time_seconds": _LATENCY,
    "vllm:request_inference_time_seconds": _LATENCY,
    "vllm:request_prefill_time_seconds": _LATENCY,
    "vllm:request_decode_time_seconds": _LATENCY,
    "vllm:request_prompt_tokens": _TOKENS,
    "vllm:request_generation_tokens": _TOKENS,
    "vllm:request_max_num_generation_tokens": _TOKENS,
    "vllm:request_params_max_tokens": _TOKENS,
    "vllm:iteration_tokens_total": (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192),
}
_HANDLERS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models")


def vllm_page(
    *,
    engines: int = 4,
    waiting: Sequence[float] = (3, 1, 0, 2),
    running: Sequence[float] = (8, 7, 9, 6),
    kv_usage: Sequence[float] = (0.5, 0.25, 0.75, 0.125),
    lora_history: int = 40,
    seed: int = 7,
) -> str:
    """A vLLM page with `engines` data-parallel engines (~200 KB with the defaults)."""
    rng = random.Random(seed)
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    model = "meta-llama/Llama-3.1-8B-Instruct"
    gauges = {
        "vllm:num_requests_waiting": waiting,
        "vllm:num_requests_running": running,
        "vllm:kv_cache_usage_perc": kv_usage,
        "vllm:gpu_cache_usage_perc": kv_usage,
    }
    for name, values in gauges.items():
        gauge = Gauge(name, name, labels, registry=registry)
        for engine in range(engines):
            gauge.labels(model, str(engine)).set(values[engine % len(values)])
    for name in ("vllm:prompt_tokens", "vllm:generation_tokens", "vllm:prefix_cache_hits"):
        counter = Counter(name, name, labels, registry=registry)
        for engine in range(engines):
            counter.labels(model, str(engine)).inc(rng.randrange(10**6))
    for name, buckets in _HISTOGRAMS.items():
        histogram = Histogram(name, name, labels, buckets=buckets, registry=registry)
        for engine in range(engines):
            _observe(histogram.labels(model, str(engine)), buckets, rng)
    _http_histograms(registry, rng)
    _lora_history(registry, lora_history)
    return generate_latest(registry).decode()


def _observe(child: Histogram, buckets: Sequence[float], rng: random.Random) -> None:
    for _ in range(20):
        child.observe(rng.uniform(0, buckets[-1]))


def _http_histograms(registry: CollectorRegistry, rng: random.Random) -> None:
    labels = ["handler", "method", "status"]
    histogram = Histogram(
        "http_request_duration_highr_seconds", "HTTP latency", labels, buckets=_HTTP,
        registry=registry,
    )  # fmt: skip
    for handler in _HANDLERS:
        for status in ("2xx", "4xx", "5xx"):
            _observe(histogram.labels(handler, "POST", status), _HTTP, rng)


def _lora_history(registry: CollectorRegistry, count: int) -> None:
    """Every label set vLLM ever used stays on the page; the newest has the highest value."""
    gauge = Gauge(
        "vllm:lora_requests_info", "LoRA", ["max_lora", "waiting_lora_adapters",
        "running_lora_adapters"], registry=registry,
    )  # fmt: skip
    for i in range(count):
        gauge.labels("4", f"old-{i}", f"sql-lora,old-{i}").set(1_700_000_000 + i)
    gauge.labels("4", "chat-lora", "sql-lora,code-lora").set(1_800_000_000)


def random_page(rng: random.Random, wanted: Iterable[str]) -> str:
    """Families of every type, named from `wanted` and decoys sharing their prefixes."""
    registry = CollectorRegistry()
    names = [*wanted, *(f"{w}_{_word(rng)}" for w in wanted), "unrelated_metric"]
    for index, name in enumerate(dict.fromkeys(names)):
        labels = [f"l{i}" for i in range(rng.randrange(4))]
        kind = (Gauge, Counter, Histogram)[rng.randrange(3)] if index else Gauge
        try:
            metric = kind(name, _label_value(rng), labels, registry=registry)
        except ValueError:  # its series clash with an earlier family's (foo vs foo_total)
            continue
        for _ in range(rng.randrange(1, 5)):
            child = metric.labels(*(_label_value(rng) for _ in labels)) if labels else metric
            _set(child, rng)
    return generate_latest(registry).decode()


def _set(child: Gauge | Counter | Histogram, rng: random.Random) -> None:
    value = rng.choice([0.0, 1.0, -2.5, 1e-9, 3.4e38, float("nan"), float("inf"), 12345.678])
    if isinstance(child, Gauge):
        child.set(value)
    elif isinstance(child, Counter):
        child.inc(1.0 if math.isnan(value) else abs(value))
    else:
        child.observe(rng.uniform(0, 20))


def _word(rng: random.Random) -> str:
    return "".join(rng.choices(string.ascii_lowercase, k=rng.randrange(1, 6)))


def _label_value(rng: random.Random) -> str:
    pieces = ["", "a", ",", "}", "{", '"', "\\", "\n", "=", " ", "\t", "é", "#", "x y", "\\n"]
    return "".join(rng.choices(pieces, k=rng.randrange(6)))


def respace_page(text: str, rng: random.Random) -> str:
    """The same page with blanks (and maybe a trailing comma) scattered between the tokens
    of each sample line, as the format allows, never inside quoted label values."""
    return "\n".join(
        line if line.startswith("#") else _respace(line, rng) for line in text.split("\n")
    )


def _respace(line: str, rng: random.Random) -> str:
    out: list[str] = []
    quoted = escaped = False
    for char in line:
        if not quoted and char in "{=,}":
            if char == "}" and out and out[-1] == '"' and rng.random() < 0.3:
                out.append(",")
            out.append(_blanks(rng) + char + (_blanks(rng) if char != "}" else ""))
            continue
        out.append(char)
        if char == '"' and not escaped:
            quoted = not quoted
        escaped = char == "\\" and not escaped
    return "".join(out)


def _blanks(rng: random.Random) -> str:
    return "".join(rng.choices(" \t", k=rng.randrange(3)))


def vllm_text(waiting: float, running: float, kv: float, *, lora: str | None = None) -> str:
    """A minimal vLLM page: the three gauges, and the LoRA info gauge when `lora` is set."""
    labels = '{engine="0",model_name="m"}'
    lines = [
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{labels} {waiting}",
        f"vllm:num_requests_running{labels} {running}",
        f"vllm:kv_cache_usage_perc{labels} {kv}",
    ]
    if lora is not None:
        lines.append(
            f'vllm:lora_requests_info{{max_lora="2",running_lora_adapters="{lora}",'
            f'waiting_lora_adapters=""}} 1.7e+09'
        )
    return "\n".join(lines) + "\n"


def sglang_text(waiting: float, running: float, kv: float) -> str:
    labels = '{model_name="m"}'
    return (
        f"sglang:num_queue_reqs{labels} {waiting}\n"
        f"sglang:num_running_reqs{labels} {running}\n"
        f"sglang:token_usage{labels} {kv}\n"
    )


def trtllm_text(waiting: float, running: float, kv: float) -> str:
    labels = '{engine_type="trtllm",model_name="m"}'
    return (
        f"trtllm_num_requests_waiting{labels} {waiting}\n"
        f"trtllm_num_requests_running{labels} {running}\n"
        f"trtllm_kv_cache_utilization{labels} {kv}\n"
    )


def triton_text(waiting: float, running: float, kv: float) -> str:
    common = 'model="tensorrt_llm",version="1"'
    request = "nv_trt_llm_request_metrics"
    block = "nv_trt_llm_kv_cache_block_metrics"
    return (
        f'{request}{{request_type="waiting",{common}}} {waiting}\n'
        f'{request}{{request_type="active",{common}}} {running}\n'
        f'{request}{{request_type="max",{common}}} 256\n'
        f'{block}{{kv_cache_block_type="fraction",{common}}} {kv}\n'
        f'{block}{{kv_cache_block_type="used",{common}}} 1000\n'
    )

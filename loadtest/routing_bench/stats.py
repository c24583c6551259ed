"""One run's figures: hit rate (client usage and engine counters), TTFT, throughput, balance."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from loadtest.routing_bench.replay import Sample
from loadtest.routing_bench.throughput import window_rate


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile by nearest rank (no interpolation); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(max(math.ceil(q * len(ordered)) - 1, 0), len(ordered) - 1)]


@dataclass(frozen=True)
class RunStats:
    """What the report shows for one router at one rate."""

    router: str
    rate: float  # offered requests per second
    requests: int  # completed
    errors: int
    hit_rate: float  # cached / prompt tokens, from the responses' usage
    engine_hit_rate: float | None  # prefix-cache hits / queries, from the engines' counters
    # (None: the engines keep no such counters, as Dynamo's mocker)
    ttft_p50_ms: float
    ttft_p90_ms: float
    ttft_p99_ms: float
    req_per_s: float  # completed requests over the run's wall time
    out_tok_per_s: float  # completion tokens over the run's wall time (its tail decides it)
    imbalance: float  # requests of the busiest engine over the mean
    cv: float  # coefficient of variation of requests per engine
    seconds: float
    route_p50_ms: float = 0.0  # Push + Pick + Pull, for kinference (0 for the others)
    route_p90_ms: float = 0.0
    first_error: str = ""
    key: str = ""  # the router's --routers key
    load: float = 0.0  # the machine's 1-minute load average at the end of the run
    seed: int = 0  # the workload's and engines' seed (`--seed`, or one of `--seeds`)
    ttfts_ms: tuple[float, ...] = ()  # every completed request's TTFT, for pooling seeds
    # Completion tokens streamed inside the arrivals window, per second of it
    # (`throughput.py`); 0 in figures written before it was measured.
    window_tok_per_s: float = 0.0
    window_s: float = 0.0

    def row(self) -> dict[str, float | int | str]:
        return {key: getattr(self, key) for key in self.__dataclass_fields__}


def summarise(
    router: str,
    rate: float,
    samples: Sequence[Sample],
    engine_deltas: Sequence[dict[str, float]],
    seconds: float,
    *,
    window_s: float = 0.0,
) -> RunStats:
    """One run's figures; `seconds` its wall time, `window_s` its arrivals window
    (0: the whole run)."""
    done = [sample for sample in samples if not sample.error]
    failed = [sample for sample in samples if sample.error]
    prompt = sum(sample.prompt_tokens for sample in done)
    cached = sum(sample.cached_tokens for sample in done)
    counted = all("queries" in delta for delta in engine_deltas)
    queries = sum(delta.get("queries", 0.0) for delta in engine_deltas)
    hits = sum(delta.get("hits", 0.0) for delta in engine_deltas)
    per_engine = [delta["requests"] for delta in engine_deltas]
    mean = statistics.fmean(per_engine) if per_engine else 0.0
    ttfts = [sample.ttft_s * 1000.0 for sample in done]
    return RunStats(
        router=router,
        rate=rate,
        requests=len(done),
        errors=len(failed),
        hit_rate=cached / prompt if prompt else 0.0,
        engine_hit_rate=(hits / queries if queries else 0.0) if counted else None,
        ttft_p50_ms=quantile(ttfts, 0.50),
        ttft_p90_ms=quantile(ttfts, 0.90),
        ttft_p99_ms=quantile(ttfts, 0.99),
        req_per_s=len(done) / seconds if seconds else 0.0,
        out_tok_per_s=sum(sample.completion_tokens for sample in done) / seconds
        if seconds
        else 0.0,
        imbalance=max(per_engine) / mean if mean else 0.0,
        cv=statistics.pstdev(per_engine) / mean if mean else 0.0,
        seconds=seconds,
        route_p50_ms=quantile([sample.route_s * 1000.0 for sample in done], 0.50),
        route_p90_ms=quantile([sample.route_s * 1000.0 for sample in done], 0.90),
        first_error=failed[0].error[:200] if failed else "",
        ttfts_ms=tuple(ttfts),
        window_tok_per_s=window_rate(done, window_s or seconds),
        window_s=window_s or seconds,
    )

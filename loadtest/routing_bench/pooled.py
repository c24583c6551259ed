"""Several seeds' runs of one (router, rate) as one row: their requests pooled.

One seed's 10 s at 6 req/s is ~43 requests, and its TTFT p90 the ~5th slowest: one
unlucky request decides a check. Run over several seeds (`--seeds`), each (router, rate)
becomes one row of every seed's requests: TTFT percentiles over the pooled samples
(nearest rank, as for one run); hit rate, throughput, balance and route time the mean
of the seeds' figures; requests, errors and seconds summed; the load average the highest
seen. The targets (`report.checks`) can then be evaluated on the pooled rows, and the
per-seed rows keep their spread (`ranges`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from loadtest.routing_bench.stats import RunStats, quantile

Cell = tuple[str, float]  # (router key, or label when it has none; rate)


def cell(stats: RunStats) -> Cell:
    return (stats.key or stats.router, stats.rate)


def pool(rows: Sequence[RunStats]) -> RunStats:
    """One row from `rows`, the same (router, rate) over several seeds."""
    if not rows:
        raise ValueError("nothing to pool")
    first = rows[0]
    if any(cell(stats) != cell(first) for stats in rows):
        raise ValueError(f"rows of several routers or rates: {sorted({cell(s) for s in rows})}")
    ttfts = tuple(value for stats in rows for value in stats.ttfts_ms)
    if not ttfts and any(stats.requests for stats in rows):
        raise ValueError("no TTFT samples to pool (figures written before --seeds?)")
    engine_hits = [stats.engine_hit_rate for stats in rows]

    def mean(values: Sequence[float]) -> float:
        return statistics.fmean(values)

    return RunStats(
        router=first.router,
        rate=first.rate,
        requests=sum(stats.requests for stats in rows),
        errors=sum(stats.errors for stats in rows),
        hit_rate=mean([stats.hit_rate for stats in rows]),
        engine_hit_rate=None
        if any(hits is None for hits in engine_hits)
        else mean([hits for hits in engine_hits if hits is not None]),
        ttft_p50_ms=quantile(ttfts, 0.50),
        ttft_p90_ms=quantile(ttfts, 0.90),
        ttft_p99_ms=quantile(ttfts, 0.99),
        req_per_s=mean([stats.req_per_s for stats in rows]),
        out_tok_per_s=mean([stats.out_tok_per_s for stats in rows]),
        imbalance=mean([stats.imbalance for stats in rows]),
        cv=mean([stats.cv for stats in rows]),
        seconds=sum(stats.seconds for stats in rows),
        route_p50_ms=mean([stats.route_p50_ms for stats in rows]),
        route_p90_ms=mean([stats.route_p90_ms for stats in rows]),
        first_error=next((stats.first_error for stats in rows if stats.first_error), ""),
        key=first.key,
        load=max(stats.load for stats in rows),
        ttfts_ms=ttfts,
        window_tok_per_s=mean([stats.window_tok_per_s for stats in rows]),
        window_s=min(stats.window_s for stats in rows),  # 0 when one seed has no window figure
    )


def pooled(results: Sequence[RunStats]) -> list[RunStats]:
    """One pooled row per (router, rate), in the order they first ran."""
    cells: dict[Cell, list[RunStats]] = {}
    for stats in results:
        cells.setdefault(cell(stats), []).append(stats)
    return [pool(rows) for rows in cells.values()]


def by_seed(results: Sequence[RunStats]) -> list[list[RunStats]]:
    """The rows of each seed, as separate runs, in seed order."""
    runs: dict[int, list[RunStats]] = {}
    for stats in results:
        runs.setdefault(stats.seed, []).append(stats)
    return [runs[seed] for seed in sorted(runs)]

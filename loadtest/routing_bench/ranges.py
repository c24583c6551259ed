"""The range of each figure over several runs of the routing benchmark, per regime.

    python -m loadtest.routing_bench.ranges [--pooled] RUN.json [RUN.json ...]

Each RUN.json is what `python -m loadtest.bench_routing --json RUN.json` wrote (one seed,
or several with `--seeds`: each seed counts as a run). Prints, per regime, a table of
min-max per router and rate (TTFT p50 and p90, hit rate, output throughput in the
arrivals window and to the last reply, imbalance, load average) and how many runs met
each target (`report.checks`). With `--pooled`, first every run's requests pooled per
router and rate (`pooled.py`) and the targets checked on those rows: seeds split over
several commands pool as if run in one.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from loadtest.routing_bench import pooled, report
from loadtest.routing_bench.stats import RunStats

Run = list[RunStats]
COLUMNS: tuple[tuple[str, Callable[[RunStats], float | None], str], ...] = (
    ("TTFT p50 ms", lambda s: s.ttft_p50_ms, "{:.0f}"),
    ("TTFT p90 ms", lambda s: s.ttft_p90_ms, "{:.0f}"),
    ("hit rate", lambda s: s.hit_rate, "{:.3f}"),
    ("output tok/s in window", lambda s: s.window_tok_per_s if s.window_s else None, "{:.0f}"),
    ("output tok/s to last reply", lambda s: s.out_tok_per_s, "{:.0f}"),
    ("imbalance", lambda s: s.imbalance, "{:.2f}"),
    ("load 1 min", lambda s: s.load, "{:.1f}"),
)


def span(figures: Sequence[float | None], form: str) -> str:
    """`low-high` (an en dash) in `form`, or one figure when they print the same; "-" when
    no run has the figure (None: written before it was measured)."""
    values = [value for value in figures if value is not None]
    if not values:
        return "-"
    low, high = form.format(min(values)), form.format(max(values))
    return low if low == high else f"{low}\u2013{high}"


def range_table(runs: Sequence[Run]) -> str:
    """Min-max over `runs` per (rate, router), in the order the routers first ran."""
    cells: dict[tuple[float, str], list[RunStats]] = defaultdict(list)
    for run in runs:
        for stats in run:
            cells[(stats.rate, stats.router)].append(stats)
    routers = list(dict.fromkeys(s.router for run in runs for s in run))
    header = ["router", "rate req/s", "runs", *(name for name, _, _ in COLUMNS)]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "--:|" * (len(header) - 1)]
    for rate, router in sorted(cells, key=lambda cell: (cell[0], routers.index(cell[1]))):
        rows = cells[(rate, router)]
        figures = [span([get(s) for s in rows], form) for _, get, form in COLUMNS]
        lines.append("| " + " | ".join([router, f"{rate:g}", str(len(rows)), *figures]) + " |")
    return "\n".join(lines)


def target_summary(runs: Sequence[Run], unit: str = "run") -> list[str]:
    """Per rate and target: in how many of the runs it was met."""
    met: dict[tuple[float, str], list[bool]] = defaultdict(list)
    for run in runs:
        for rate in sorted({s.rate for s in run}):
            for target, ok, _ in report.checks([s for s in run if s.rate == rate]):
                met[(rate, target)].append(ok)
    return [
        f"- {rate:g} req/s, {target}: met in {sum(oks)} of {len(oks)} {unit}(s)"
        for (rate, target), oks in sorted(met.items())
    ]


def pooled_summary(results: Sequence[RunStats]) -> list[str]:
    """Markdown lines for one command's several seeds: the pooled rows, the targets checked
    on them, and the per-seed range with how many seeds met each target."""
    runs = pooled.by_seed(results)
    rows = pooled.pooled(results)
    seeds = ", ".join(str(run[0].seed) for run in runs)
    return [
        f"Pooled over seeds {seeds}: TTFT percentiles of all their requests; hit rate, "
        "throughput, balance the seeds' mean; load the highest.",
        "",
        report.table(rows),
        "",
        *(line.replace("- ", "- pooled: ", 1) for line in report.verdicts(rows)),
        "",
        "Per seed, lowest\u2013highest:",
        "",
        range_table(runs),
        "",
        *target_summary(runs, unit="seed"),
    ]


def summary(paths: Sequence[Path], pool: bool = False) -> str:
    by_regime: dict[str, list[Run]] = defaultdict(list)
    for path in paths:
        meta, results = report.load(path)
        by_regime[str(meta["regime"])] += pooled.by_seed(results)
    parts = []
    for regime, runs in by_regime.items():
        if pool:
            rows = pooled.pooled([stats for run in runs for stats in run])
            parts += [f"#### {regime}: pooled over {len(runs)} run(s)", "", report.table(rows)]
            parts += ["", *report.verdicts(rows), ""]
        parts += [f"#### {regime}: range over {len(runs)} run(s)", "", range_table(runs), ""]
        parts += [*target_summary(runs), ""]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("runs", type=Path, nargs="+")
    cli.add_argument("--pooled", action="store_true", help="also every run's requests pooled")
    args = cli.parse_args(argv)
    print(summary(args.runs, pool=args.pooled))
    return 0


if __name__ == "__main__":
    sys.exit(main())

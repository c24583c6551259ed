"""The precise Pick bench's figures (`loadtest.bench_precise_pick`): percentiles over a row's
Picks, rows pooled over runs, and the raw Picks as JSON so that runs of separate processes
pool too.

Percentiles are by nearest rank over the Picks themselves (no interpolation): a p99 over
fewer than 100 Picks is the slowest one, and the table says so. A run's loop stalls (the
picker's worst lag and its wake-ups over 10 ms late) are the picker process's of that run;
pooled, they are given per run (their sum, how many runs had any, the most in one run) and
the worst lag of all runs.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtest.routing_bench.stats import quantile

KIB = 1024
TARGET_MS = 5.0  # issue 16: Pick p99 in precise mode <= 5 ms for 64 KiB prompts
QUANTILES = (0.5, 0.9, 0.99)


@dataclass
class Row:
    """One run of one (prompt size, workload, in flight, mode): its Picks and its loop."""

    size: int
    workload: str
    inflight: int
    mode: str
    run: int = 0  # which repeat of the row (`--repeat`)
    samples: list[float] = field(default_factory=list)  # each Pick (s)
    turns: list[int] = field(default_factory=list)  # each sample's turn in its conversation
    with_push: list[float] = field(default_factory=list)  # PushBody + Pick (s)
    lag_s: float = 0.0  # the picker loop's worst stall
    stalls: int = 0  # its stalls over 10 ms
    started: str = ""  # UTC, ISO
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average before, after

    @property
    def key(self) -> tuple[int, str, int, str]:
        return self.size, self.workload, self.inflight, self.mode

    def pct(self, q: float, push: bool = False) -> float:
        """The q-quantile of its Picks (or PushBody + Picks), ms."""
        return quantile(self.with_push if push else self.samples, q) * 1000


def spread(samples: Sequence[float]) -> str:
    """p50 / p90 / p99 / max (ms) of `samples` (s), labelled."""
    p50, p90, p99 = (quantile(samples, q) * 1000 for q in QUANTILES)
    return f"p50 {p50:.2f} ms p90 {p90:.2f} ms p99 {p99:.2f} ms max {max(samples) * 1000:.2f} ms"


@dataclass(frozen=True)
class Pooled:
    """The runs of one row key, their Picks pooled."""

    runs: tuple[Row, ...]

    @property
    def key(self) -> tuple[int, str, int, str]:
        return self.runs[0].key

    @property
    def samples(self) -> list[float]:
        return [s for run in self.runs for s in run.samples]

    @property
    def with_push(self) -> list[float]:
        return [s for run in self.runs for s in run.with_push]

    def over(self, target_ms: float = TARGET_MS) -> int:
        """How many Picks took longer than `target_ms`."""
        return sum(1 for s in self.samples if s * 1000 > target_ms)

    def stalls(self) -> str:
        """Stalls over 10 ms: in all, in how many runs, the most in one run."""
        per_run = [run.stalls for run in self.runs]
        any_runs = sum(1 for n in per_run if n)
        return f"{sum(per_run)} ({any_runs} of {len(per_run)} runs; most {max(per_run)})"

    def lag(self) -> str:
        """The worst loop lag of all runs and the median run's worst (ms)."""
        lags = [run.lag_s * 1000 for run in self.runs]
        return f"{max(lags):.1f} (median run {statistics.median(lags):.1f})"


def pool(rows: Iterable[Row]) -> list[Pooled]:
    """Rows grouped by key, in the order their keys first came."""
    grouped: dict[tuple[int, str, int, str], list[Row]] = {}
    for row in rows:
        grouped.setdefault(row.key, []).append(row)
    return [Pooled(tuple(runs)) for runs in grouped.values()]


def table(rows: Iterable[Row]) -> str:
    """One line per row key, its runs pooled."""
    lines = [
        "| prompt | workload | in flight | mode | runs | Picks | Pick p50 / p90 / p99 / max (ms) "
        f"| Picks > {TARGET_MS:g} ms | loop stalls > 10 ms | worst loop lag (ms) "
        "| PushBody + Pick p50 / p99 (ms) |",
        "|---|---|--:|---|--:|--:|---|--:|---|---|---|",
    ]
    for pooled in pool(rows):
        size, workload, inflight, mode = pooled.key
        picks = pooled.samples
        p50, p90, p99 = (quantile(picks, q) * 1000 for q in QUANTILES)
        p99_text = f"{p99:.2f}" + ("" if len(picks) >= 100 else " (= max, n < 100)")
        push = pooled.with_push
        lines.append(
            f"| {size // KIB} KiB | {workload} | {inflight} | {mode} | {len(pooled.runs)} "
            f"| {len(picks)} | {p50:.2f} / {p90:.2f} / {p99_text} / {max(picks) * 1000:.2f} "
            f"| {pooled.over()} | {pooled.stalls()} | {pooled.lag()} "
            f"| {quantile(push, 0.5) * 1000:.2f} / {quantile(push, 0.99) * 1000:.2f} |"
        )
    return "\n".join(lines)


def per_run(rows: Iterable[Row]) -> str:
    """Per row key, each run's Pick p99, loop stalls over 10 ms and worst lag, in run order."""
    lines = []
    for pooled in pool(rows):
        size, workload, inflight, mode = pooled.key
        runs = pooled.runs
        lines.append(
            f"{size // KIB} KiB {workload} x{inflight} {mode}, per run: Pick p99 (ms) "
            + ", ".join(f"{run.pct(0.99):.2f}" for run in runs)
            + "; stalls > 10 ms "
            + ", ".join(str(run.stalls) for run in runs)
            + "; worst lag (ms) "
            + ", ".join(f"{run.lag_s * 1000:.1f}" for run in runs)
        )
    return "\n".join(lines)


def dump(rows: Iterable[Row], meta: dict[str, Any], path: Path) -> None:
    """The rows with every Pick (s), and what the run was (`meta`), as JSON."""
    document = {"meta": meta, "rows": [dataclasses.asdict(row) for row in rows]}
    path.write_text(json.dumps(document))


def load(paths: Iterable[Path]) -> list[Row]:
    """The rows of `dump`'s files, in order; runs renumbered to follow on across files."""
    rows: list[Row] = []
    seen: dict[tuple[int, str, int, str], int] = {}
    for path in paths:
        for raw in json.loads(path.read_text())["rows"]:
            row = Row(**{**raw, "load": tuple(raw["load"])})
            row.run = seen.get(row.key, 0)
            seen[row.key] = row.run + 1
            rows.append(row)
    return rows

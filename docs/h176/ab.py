"""h176 A/B figures: python docs/h176/ab.py OUT — per row: pooled Pick p50/p99 per side,
per-run p99 (and p50) medians and ranges, exact two-sided Mann-Whitney p over the runs."""

from __future__ import annotations

import itertools
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from loadtest.routing_bench.stats import quantile  # the bench's own nearest rank


def mann_whitney(a: list[float], b: list[float]) -> float:
    """Exact two-sided p of the rank-sum (ties: mid-ranks; enumerates every split)."""
    pooled = sorted(a + b)
    rank = {v: statistics.mean(i + 1 for i, w in enumerate(pooled) if w == v) for v in pooled}
    ranks = [rank[v] for v in a + b]
    observed = sum(ranks[: len(a)])
    mean = len(a) * (len(ranks) + 1) / 2
    sums = [sum(c) for c in itertools.combinations(ranks, len(a))]
    return sum(abs(s - mean) >= abs(observed - mean) - 1e-9 for s in sums) / len(sums)


def main(out: Path) -> None:
    rows: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(out.glob("*.json")):
        side = path.name.split("-")[0]
        data = json.loads(path.read_text())
        for row in data["rows"]:
            key = (row["size"], row["workload"], row["inflight"], row["mode"])
            rows[key][side].append(row)
    for key, sides in sorted(rows.items()):
        print(f"{key[0] // 1024} KiB {key[1]} x{key[2]} {key[3]}:")
        per = {}
        for side in ("base", "branch"):
            runs = sides.get(side, [])
            if not runs:
                continue
            pooled = [s * 1000 for r in runs for s in r["samples"]]
            p99s = [quantile([s * 1000 for s in r["samples"]], 0.99) for r in runs]
            p50s = [quantile([s * 1000 for s in r["samples"]], 0.5) for r in runs]
            per[side] = (p99s, p50s)
            print(
                f"  {side:6s} runs {len(runs)} pooled p50 {quantile(pooled, 0.5):.2f}"
                f" p99 {quantile(pooled, 0.99):.2f} max {max(pooled):.2f} | per-run p99 median"
                f" {statistics.median(p99s):.2f} [{min(p99s):.2f}-{max(p99s):.2f}] p50 median"
                f" {statistics.median(p50s):.2f} [{min(p50s):.2f}-{max(p50s):.2f}]"
            )
        if len(per) == 2:
            print(
                f"  Mann-Whitney p: per-run p99 {mann_whitney(per['base'][0], per['branch'][0]):.4f}"
                f", p50 {mann_whitney(per['base'][1], per['branch'][1]):.4f}"
            )


if __name__ == "__main__":
    main(Path(sys.argv[1]))

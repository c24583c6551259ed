"""A/B of `bench_precise_pick --json` files: per row, each arm's per-run Pick p50 and p99
(median, range), its pooled p50 / p99, and an exact two-sided Mann-Whitney p on the per-run
figures (every split enumerated).

    python docs/h174/ab.py BASE_GLOB FIX_GLOB
"""

from __future__ import annotations

import glob
import itertools
import statistics
import sys
from pathlib import Path

from loadtest.precise_pick_stats import Row, load


def exact_p(a: list[float], b: list[float]) -> float:
    """Two-sided exact Mann-Whitney p: splits with a U at least as far from its mean."""
    pooled, n = a + b, len(a)

    def u(first: tuple[float, ...], second: list[float]) -> float:
        return sum((x > y) + 0.5 * (x == y) for x in first for y in second)

    mean = len(a) * len(b) / 2
    seen = abs(u(tuple(a), b) - mean)
    splits = extreme = 0
    for chosen in itertools.combinations(range(len(pooled)), n):
        rest = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        splits += 1
        extreme += abs(u(tuple(pooled[i] for i in chosen), rest) - mean) >= seen - 1e-9
    return extreme / splits


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] * 1000


def arm(pattern: str) -> dict[str, list[Row]]:
    rows: dict[str, list[Row]] = {}
    for row in load(Path(p) for p in sorted(glob.glob(pattern))):
        rows.setdefault(f"{row.workload} x{row.inflight} {row.mode}", []).append(row)
    return rows


def main() -> None:
    base, fix = arm(sys.argv[1]), arm(sys.argv[2])
    for name in base:
        print(name)
        for q in (0.5, 0.99):
            a = [pct(r.samples, q) for r in base[name]]
            b = [pct(r.samples, q) for r in fix[name]]
            pooled = [pct([s for r in side[name] for s in r.samples], q) for side in (base, fix)]
            print(
                f"  p{round(q * 100)}: base median {statistics.median(a):.2f}"
                f" ({min(a):.2f}-{max(a):.2f}), fix {statistics.median(b):.2f}"
                f" ({min(b):.2f}-{max(b):.2f}); pooled {pooled[0]:.2f} vs {pooled[1]:.2f};"
                f" runs {len(a)}/{len(b)}, exact Mann-Whitney p {exact_p(a, b):.3f}"
            )


if __name__ == "__main__":
    main()

"""Medians, ranges and exact two-sided Mann-Whitney p per row and figure over ab.sh runs.

python docs/h168/stats.py OUT_DIR... (arms named by their copy's directory: base, br)
"""

from __future__ import annotations

import glob
import itertools
import re
import statistics
import sys
from collections import defaultdict

LINE = re.compile(
    r"^(?P<row>\d+ KiB [\w-]+ x\d+ \w+): p50 (?P<p50>[\d.]+) ms p99 (?P<p99>[\d.]+) ms "
    r"lag (?P<lag>[\d.]+) ms \((?P<stalls>\d+) over 10 ms\) push\+pick p50 [\d.]+ ms "
    r"p99 (?P<pp99>[\d.]+) ms"
)
FIGURES = {"stalls": "stalls>10ms", "lag": "worst lag", "p50": "p50", "p99": "p99"}
FIGURES["pp99"] = "push+Pick p99"


def ranks(values: list[float]) -> list[float]:
    """Mid-ranks (1-based) of `values`."""
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            out[order[k]] = (start + end) / 2 + 1
        start = end + 1
    return out


def exact_p(a: list[float], b: list[float]) -> float:
    """Two-sided: the share of all splits of the pooled ranks whose first side's rank sum
    lies at least as far from its mean as `a`'s does."""
    pooled = ranks(a + b)
    mean = len(a) * (len(pooled) + 1) / 2
    seen = abs(sum(pooled[: len(a)]) - mean)
    splits = list(itertools.combinations(pooled, len(a)))
    return sum(abs(sum(s) - mean) >= seen - 1e-9 for s in splits) / len(splits)


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):g} [{min(values):g}-{max(values):g}]"


def main(roots: list[str]) -> None:
    runs: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for root in roots:
        for path in sorted(glob.glob(f"{root}/*-*.txt")):
            arm = path.rsplit("-", 1)[1][:-4]
            with open(path) as lines:
                for line in lines:
                    if m := LINE.match(line.strip()):
                        for key in FIGURES:
                            runs[m["row"], key, arm].append(float(m[key]))
    print("| row, figure | runs a side | base | branch | branch lower in | p |")
    print("|---|---|---|---|---|---|")
    for row, key in sorted(
        {(r, k) for r, k, _ in runs}, key=lambda rk: (rk[0], list(FIGURES).index(rk[1]))
    ):
        a, b = runs[row, key, "base"], runs[row, key, "br"]
        lower = sum((y < x) + 0.5 * (y == x) for x in a for y in b)
        print(
            f"| {row}, {FIGURES[key]} | {len(a)}/{len(b)} | {cell(a)} | {cell(b)} | "
            f"{lower:g}/{len(a) * len(b)} | {exact_p(a, b):.3f} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])

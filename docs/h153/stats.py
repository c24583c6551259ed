"""Per-run figures of docs/h153/mb.py JSON files, base against branch: medians [range] and an
exact two-sided Mann-Whitney p (every split of the pooled runs enumerated).

    python docs/h153/stats.py OUTDIR
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
from pathlib import Path


def u_stat(a: list[float], b: list[float]) -> float:
    return sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b)


def mann_whitney(a: list[float], b: list[float]) -> float:
    pooled, n = a + b, len(a)
    mean = len(a) * len(b) / 2
    seen = abs(u_stat(a, b) - mean)
    extreme = total = 0
    for chosen in itertools.combinations(range(len(pooled)), n):
        picked = set(chosen)
        x = [pooled[i] for i in chosen]
        y = [pooled[i] for i in range(len(pooled)) if i not in picked]
        total += 1
        extreme += abs(u_stat(x, y) - mean) >= seen - 1e-9
    return extreme / total


def main(out: Path) -> None:
    runs: dict[str, list[dict]] = {"base": [], "br": []}
    for path in sorted(out.glob("*.json")):
        runs[path.name.split("-")[0]].append(json.loads(path.read_text()))
    kinds = sorted(runs["base"][0])
    print(f"runs: base {len(runs['base'])}, branch {len(runs['br'])}")
    print("| class | figure | base median [range] | branch median [range] | p |")
    print("|---|---|---|---|--:|")
    for kind in kinds:
        for figure in ("cpu_p50", "wall_p50", "cpu_mean"):
            a = [r[kind][figure] for r in runs["base"]]
            b = [r[kind][figure] for r in runs["br"]]
            print(
                f"| {kind} | {figure} | {statistics.median(a):.3f} [{min(a):.3f}–{max(a):.3f}] "
                f"| {statistics.median(b):.3f} [{min(b):.3f}–{max(b):.3f}] | {mann_whitney(a, b):.4f} |"
            )


if __name__ == "__main__":
    main(Path(sys.argv[1]))

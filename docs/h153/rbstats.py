"""The routing benchmark's runs (docs/h153/rb.sh's JSON), base against branch: per run and
seed TTFT p50 / p90, hit rate, output tok/s in the window; medians and exact two-sided
Mann-Whitney over runs, per seed.

    python docs/h153/rbstats.py OUTDIR
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from stats import mann_whitney  # docs/h153/stats.py

FIGURES = ("ttft_p50_ms", "ttft_p90_ms", "hit_rate", "window_tok_per_s")


def main(out: Path) -> None:
    rows: dict[tuple[str, int], list[dict]] = {}
    for path in sorted(out.glob("*.json"), key=lambda p: int(p.name.split("-")[0])):
        side = path.stem.split("-", 1)[1]
        for result in json.loads(path.read_text())["results"]:
            rows.setdefault((side, result["seed"]), []).append(result)
            print(
                f"| {path.stem} | {result['seed']} | {result['ttft_p50_ms']:.1f} / "
                f"{result['ttft_p90_ms']:.1f} | {result['hit_rate']:.3f} | "
                f"{result['window_tok_per_s']:.1f} | {result['load']:.2f} |"
            )
    sides = sorted({side for side, _ in rows})
    for seed in sorted({seed for _, seed in rows}):
        for figure in FIGURES:
            a, b = (rows.get((side, seed), []) for side in sides)
            x, y = [r[figure] for r in a], [r[figure] for r in b]
            if not x or not y:
                continue
            print(
                f"| s{seed} | {figure} | {sides[0]} {statistics.median(x):.3f} "
                f"[{min(x):.3f}–{max(x):.3f}] | {sides[1]} {statistics.median(y):.3f} "
                f"[{min(y):.3f}–{max(y):.3f}] | {mann_whitney(x, y):.3f} |"
            )


if __name__ == "__main__":
    main(Path(sys.argv[1]))

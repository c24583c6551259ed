"""Per directory (or --files), two cputime.py JSONL files side by side: wall, cpu+kids."""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def totals(path: str, files: bool) -> dict[str, list[float]]:
    agg: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for line in open(path):
        row = json.loads(line)
        where = row["id"].split("::")[0]
        parts = where.split("/")
        key = where if files else ("/".join(parts[:2]) if len(parts) > 2 else "tests/(top)")
        agg[key][0] += 1
        agg[key][1] += row["wall"]
        agg[key][2] += row["cpu"] + row["kids"]
    return agg


def main() -> None:
    files = "--files" in sys.argv
    a_path, b_path = [p for p in sys.argv[1:] if p.endswith(".jsonl")]
    a, b = totals(a_path, files), totals(b_path, files)
    print(
        f"{'where':52s} {'nA':>5s} {'nB':>5s} {'wallA':>7s} {'wallB':>7s} {'cpuA':>7s} {'cpuB':>7s}"
    )
    keys = sorted(set(a) | set(b), key=lambda k: -max(a[k][1], b[k][1]))
    tot = [0.0] * 6
    for k in keys:
        ra, rb = a[k], b[k]
        vals = [ra[0], rb[0], ra[1], rb[1], ra[2], rb[2]]
        tot = [t + v for t, v in zip(tot, vals)]
        print(f"{k:52s} {ra[0]:5d} {rb[0]:5d} {ra[1]:7.1f} {rb[1]:7.1f} {ra[2]:7.1f} {rb[2]:7.1f}")
    t = tot
    print(f"{'TOTAL':52s} {t[0]:5.0f} {t[1]:5.0f} {t[2]:7.1f} {t[3]:7.1f} {t[4]:7.1f} {t[5]:7.1f}")


main()

"""Sum a cputime.py JSONL per directory (or per file with --files); top tests by wall with --top N."""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def key(nodeid: str, files: bool) -> str:
    path = nodeid.split("::")[0]
    parts = path.split("/")
    return path if files else "/".join(parts[:2]) if len(parts) > 2 else "tests/(top)"


def main() -> None:
    args = sys.argv[1:]
    files = "--files" in args
    top = int(args[args.index("--top") + 1]) if "--top" in args else 0
    paths = [a for a in args if a.endswith(".jsonl")]
    rows = [json.loads(line) for p in paths for line in open(p)]
    if top:
        for r in sorted(rows, key=lambda r: -r["wall"])[:top]:
            print(f"{r['wall']:7.2f} {r['cpu']:7.2f} {r['kids']:7.2f}  {r['id']}")
        return
    agg: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for r in rows:
        a = agg[key(r["id"], files)]
        a[0] += 1
        a[1] += r["wall"]
        a[2] += r["cpu"]
        a[3] += r["kids"]
    tot = [0, 0.0, 0.0, 0.0]
    print(f"{'where':60s} {'n':>5s} {'wall':>8s} {'cpu':>8s} {'kids':>8s}")
    for k, a in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"{k:60s} {a[0]:5d} {a[1]:8.1f} {a[2]:8.1f} {a[3]:8.1f}")
        tot = [t + x for t, x in zip(tot, a)]
    print(f"{'TOTAL':60s} {tot[0]:5d} {tot[1]:8.1f} {tot[2]:8.1f} {tot[3]:8.1f}")


main()

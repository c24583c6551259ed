"""Per side and row, the first turns' Picks by wave (the first 16 first turns of a run are
its first wave) and the later turns': python docs/h176/turns.py OUT [workload]."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from loadtest.routing_bench.stats import quantile

out, workload = Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "chat"
for side in ("base", "branch"):
    groups: dict[str, list[float]] = {"wave 1": [], "wave 2": [], "later": []}
    for path in sorted(out.glob(f"{side}-*.json")):
        for row in json.loads(path.read_text())["rows"]:
            if row["workload"] != workload or row["inflight"] != 16:
                continue
            firsts = [s for s, t in zip(row["samples"], row["turns"]) if t == 0]
            groups["wave 1"] += firsts[:16]
            groups["wave 2"] += firsts[16:]
            groups["later"] += [s for s, t in zip(row["samples"], row["turns"]) if t]
    print(
        side,
        " | ".join(
            f"{k} n {len(v)} p50 {quantile(v, 0.5) * 1000:.2f} p90 {quantile(v, 0.9) * 1000:.2f}"
            f" max {max(v) * 1000:.2f}"
            for k, v in groups.items()
            if v
        ),
    )

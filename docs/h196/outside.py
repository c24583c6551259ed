"""h196: the part of each request's TTFT outside the serving Dynamo frontend, per run.

    python docs/h196/outside.py REQ.jsonl SIDE.jsonl

Per (seed, router): client TTFT, frontend TTFT (nvext timing) and outside = client - frontend,
p50 / p90 / mean; then the TTFT p50 / p90 each router would have with the other's outside
part put in place of its own request by request (same conversation and turn), which splits
the p90 gap into the hop and the rest (placement and engine time).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parents[1] / "h170"))
from occupancy import joined


def q(values: list[float], p: float) -> float:
    return float(np.quantile(np.array(values), p, method="linear"))


def main() -> None:
    runs = joined(sys.argv[1], sys.argv[2])
    seeds = sorted({seed for seed, _ in runs})
    for seed in seeds:
        by = {router: rows for (s, router), rows in runs.items() if s == seed}
        for router, rows in sorted(by.items()):
            t = [r["ttft_ms"] for r in rows]
            o = [r["outside_ms"] for r in rows]
            i = [a - b for a, b in zip(t, o)]
            print(
                f"seed {seed} {router:10s} n {len(rows)}: TTFT p50/p90 {q(t, 0.5):6.1f} / {q(t, 0.9):6.1f}"
                f"  frontend p50/p90 {q(i, 0.5):6.1f} / {q(i, 0.9):6.1f}"
                f"  outside p50/p90/mean {q(o, 0.5):5.1f} / {q(o, 0.9):5.1f} / {np.mean(o):5.1f}"
            )
        if {"kinference", "dynamo"} <= set(by):
            k = {(r["conversation"], r["turn"]): r for r in by["kinference"]}
            d = {(r["conversation"], r["turn"]): r for r in by["dynamo"]}
            common = sorted(set(k) & set(d))
            swapped = [k[c]["ttft_ms"] - k[c]["outside_ms"] + d[c]["outside_ms"] for c in common]
            inside_d = [d[c]["ttft_ms"] for c in common]
            print(
                f"seed {seed}: kinference with Dynamo's outside part request by request "
                f"(n {len(common)}): p50/p90 {q(swapped, 0.5):.1f} / {q(swapped, 0.9):.1f} "
                f"against Dynamo's {q(inside_d, 0.5):.1f} / {q(inside_d, 0.9):.1f}"
            )


if __name__ == "__main__":
    main()

"""h189: the A/B's figures (`ab.sh` output): per side median [min–max] of each run's figures,
exact two-sided Mann-Whitney p (h188's enumeration, `docs/h188/mw.py`).

    python docs/h189/mw.py OUT.jsonl
"""

import json
import statistics
import sys


def mannwhitneyu(a: list[float], b: list[float]) -> float:
    """Exact two-sided p: the rank sum of `a` (midranks on ties) against every way of
    choosing len(a) of the pooled ranks (counted by dynamic programming)."""
    pooled = sorted(a + b)
    rank = {}
    for v in set(pooled):
        first = pooled.index(v)
        rank[v] = first + 1 + first + pooled.count(v)  # twice the midrank: integers
    ranks = [rank[v] for v in a + b]
    n, k = len(ranks), len(a)
    ways = [dict() for _ in range(k + 1)]
    ways[0][0] = 1
    for r in ranks:
        for j in range(k, 0, -1):
            for total, count in ways[j - 1].items():
                ways[j][total + r] = ways[j].get(total + r, 0) + count
    observed = sum(rank[v] for v in a)
    mean = k * (sum(ranks) / n)
    every = sum(ways[k].values())
    extreme = sum(c for t, c in ways[k].items() if abs(t - mean) >= abs(observed - mean) - 1e-9)
    return extreme / every


rows = [json.loads(line) for line in open(sys.argv[1])]
FIGURES = (
    "decision_cpu_ms_mean",
    "decision_cpu_ms_p50",
    "decision_wall_ms_mean",
    "replays_per_pick",
    "skipped_per_pick",
    "hit_rate",
    "ttft_p50_ms",
    "ttft_p90_ms",
)
for figure in FIGURES:
    a = [r["r"][figure] for r in rows if r["side"] == "base"]
    b = [r["r"][figure] for r in rows if r["side"] == "br"]
    p = mannwhitneyu(a, b)
    ratio = statistics.median(b) / statistics.median(a) if statistics.median(a) else float("nan")
    print(
        f"{figure}: base {statistics.median(a):.3f} [{min(a):.3f}–{max(a):.3f}] (n {len(a)})"
        f" / branch {statistics.median(b):.3f} [{min(b):.3f}–{max(b):.3f}] (n {len(b)})"
        f" ratio {ratio:.3f} p {p:.2g}"
    )
print("runs:", " ".join(f"{r['side']}:{r['start']}→{r['end']}" for r in rows))
print("errors:", sum(r["r"]["errors"] for r in rows), "picks:", [r["r"]["picks"] for r in rows])

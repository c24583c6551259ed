"""h188: the A/B's figures (`ab.sh` output): per side median [min–max] of the decision's and
surviving's CPU ms per Pick, exact two-sided Mann-Whitney p; answers differing (must be 0).

    python docs/h188/mw.py OUT.jsonl
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
for figure in ("decision_ms_per_pick", "surviving_ms_per_pick"):
    a = [r["r"][figure] for r in rows if r["side"] == "base"]
    b = [r["r"][figure] for r in rows if r["side"] == "br"]
    p = mannwhitneyu(a, b)
    print(
        f"{figure}: base {statistics.median(a):.3f} [{min(a):.3f}–{max(a):.3f}] (n {len(a)})"
        f" / branch {statistics.median(b):.3f} [{min(b):.3f}–{max(b):.3f}] (n {len(b)})"
        f" ratio {statistics.median(b) / statistics.median(a):.3f} p {p:.2g}"
    )
print(
    "answers differing:",
    sum(r["r"]["differ"] for r in rows),
    "of",
    len(rows),
    "runs;",
    "utc",
    rows[0]["utc"],
    "–",
    rows[-1]["utc"],
    "load",
    min(r["load"] for r in rows),
    "–",
    max(r["load"] for r in rows),
)

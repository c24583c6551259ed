"""h206: the A/B's figures from `ab.sh` output — per side median [min-max] of the gateway's
CPU ms per request (the deciding figure), its reads per request, TTFT p50/p90 and added
p50/p90, with the exact two-sided Mann-Whitney p (h188's enumeration).

    python docs/h206/mw.py docs/h206/ab1.jsonl
"""

import json
import statistics
import sys

COLUMNS = {"TTFT p50": 2, "TTFT p90": 3, "added p50": 5, "added p90": 6, "CPU ms/req": 10,
           "reads/req": 11}  # fmt: skip


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
    ways: list[dict[int, int]] = [{} for _ in range(k + 1)]
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


def main() -> None:
    with open(sys.argv[1]) as lines:
        rows = [json.loads(line) for line in lines]
    for row in rows:
        row["cells"] = [c.strip() for c in row["row"].split("|")[1:-1]]
    for name, at in COLUMNS.items():
        a = [float(r["cells"][at]) for r in rows if r["side"] == "base"]
        b = [float(r["cells"][at]) for r in rows if r["side"] == "br"]
        p = mannwhitneyu(a, b)
        print(
            f"{name}: base {statistics.median(a):.2f} [{min(a):.2f}-{max(a):.2f}] (n {len(a)}), "
            f"branch {statistics.median(b):.2f} [{min(b):.2f}-{max(b):.2f}] (n {len(b)}), p {p:.3f}"
        )


main()

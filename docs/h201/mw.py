"""Exact two-sided Mann-Whitney U of the A/B runs' per-batch CPU (no ties expected).
python3 docs/h201/mw.py docs/h201/ab1.jsonl"""

import itertools
import json
import statistics
import sys


def exact_p(a: list[float], b: list[float]) -> float:
    pooled = sorted(a + b)
    ranks = {v: i + 1 for i, v in enumerate(pooled)}
    observed = sum(ranks[v] for v in a)
    n = len(pooled)
    mean = len(a) * (n + 1) / 2
    sums = [sum(c) for c in itertools.combinations(range(1, n + 1), len(a))]
    return sum(abs(s - mean) >= abs(observed - mean) for s in sums) / len(sums)


with open(sys.argv[1]) as lines:
    rows = [json.loads(line[: line.index("}") + 1]) for line in lines]
for key in ("median_us", "min_us"):
    a = [r[key] for r in rows if r["tag"].startswith("a")]
    b = [r[key] for r in rows if r["tag"].startswith("b")]
    ma, mb = statistics.median(a), statistics.median(b)
    print(
        f"{key}: main {ma:.1f} [{min(a):.1f}-{max(a):.1f}] (n={len(a)}), branch {mb:.1f} "
        f"[{min(b):.1f}-{max(b):.1f}] (n={len(b)}), {100 * (mb - ma) / ma:+.1f} %, "
        f"exact two-sided MW p = {exact_p(a, b):.2g}"
    )

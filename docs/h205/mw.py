"""Exact two-sided Mann-Whitney U of alternated A/B runs (h201's, sides and figures named).
python3 docs/h205/mw.py RUNS.jsonl [A B]   (the tags' first letters; default a b)"""

import itertools
import json
import statistics
import sys


def exact_p(a: list[float], b: list[float]) -> float:
    pooled = sorted(a + b)
    ranks = {v: i + 1 for i, v in enumerate(pooled)}  # ties: none expected
    observed = sum(ranks[v] for v in a)
    n = len(pooled)
    mean = len(a) * (n + 1) / 2
    sums = [sum(c) for c in itertools.combinations(range(1, n + 1), len(a))]
    return sum(abs(s - mean) >= abs(observed - mean) for s in sums) / len(sums)


side_a, side_b = sys.argv[2:4] if len(sys.argv) > 3 else ("a", "b")
with open(sys.argv[1]) as lines:
    rows = [json.loads(line[: line.index("}") + 1]) for line in lines]
for key in ("median_us", "min_us", "thread_median_us", "thread_min_us"):
    a = [r[key] for r in rows if r["tag"].startswith(side_a) and key in r]
    b = [r[key] for r in rows if r["tag"].startswith(side_b) and key in r]
    if not a or not b:
        continue
    ma, mb = statistics.median(a), statistics.median(b)
    print(
        f"{key}: {side_a} {ma:.1f} [{min(a):.1f}-{max(a):.1f}] (n={len(a)}), {side_b} {mb:.1f} "
        f"[{min(b):.1f}-{max(b):.1f}] (n={len(b)}), {100 * (mb - ma) / ma:+.1f} %, "
        f"exact two-sided MW p = {exact_p(a, b):.2g}"
    )

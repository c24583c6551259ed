"""h196: the A/B's table — per run, then per side median [range] and exact two-sided
Mann-Whitney p (exact: every split of the pooled midranks enumerated).

    python docs/h196/ab_table.py /tmp/h196/A*/run.json -- /tmp/h196/B*/run.json [--router KEY]
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys

FIGS = ("hit_rate", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "window_tok_per_s")


def mw_exact(x: list[float], y: list[float]) -> float:
    """Exact two-sided Mann-Whitney p: the share of all splits of the pooled values whose
    rank sum is at least as far from its mean as the observed one."""
    pooled = sorted(x + y)
    rank = {}
    for v in set(pooled):
        idx = [i + 1 for i, w in enumerate(pooled) if w == v]
        rank[v] = sum(idx) / len(idx)
    ranks = [rank[v] for v in x + y]
    n = len(x)
    mean = n * (len(ranks) + 1) / 2
    seen = abs(sum(rank[v] for v in x) - mean)
    total = extreme = 0
    for combo in itertools.combinations(ranks, n):
        total += 1
        extreme += abs(sum(combo) - mean) >= seen - 1e-9
    return extreme / total


def rows(paths: list[str], key: str) -> list[dict[str, float]]:
    out = []
    for path in paths:
        data = json.load(open(path))
        for r in data["results"]:
            if r["key"] == key:
                out.append({"path": path, **r})
    return out


def main() -> None:
    argv = sys.argv[1:]
    key = "kinference"
    if "--router" in argv:
        i = argv.index("--router")
        key = argv[i + 1]
        del argv[i : i + 2]
    cut = argv.index("--")
    a, b = rows(argv[:cut], key), rows(argv[cut + 1 :], key)
    for side, rs in (("A", a), ("B", b)):
        for r in rs:
            print(
                side,
                r["path"].split("/")[-2],
                f"seed {r['seed']}",
                f"load {r['load']:.1f}",
                " ".join(f"{f} {r[f]:.3f}" if f == "hit_rate" else f"{f} {r[f]:.1f}" for f in FIGS),
            )
    for f in FIGS:
        x, y = [r[f] for r in a], [r[f] for r in b]
        p = mw_exact(x, y)
        print(
            f"{f}: A {statistics.median(x):.3f} [{min(x):.3f}-{max(x):.3f}]  "
            f"B {statistics.median(y):.3f} [{min(y):.3f}-{max(y):.3f}]  p {p:.3g}  (n {len(x)}/{len(y)})"
        )


if __name__ == "__main__":
    main()

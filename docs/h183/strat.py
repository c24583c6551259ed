"""Exact two-sided Mann-Whitney per seed and stratified over seeds, by dynamic programming
over the midranks (h155's `summary.py` enumerates every split: too slow past 6 a side).

python docs/h183/strat.py OUT TAG[,TAG...] BASE BR"""

import collections
import glob
import importlib.util
import json
import os
import statistics
import sys

_SPEC = importlib.util.spec_from_file_location(
    "h168_stats", os.path.join(os.path.dirname(__file__), "..", "h168", "stats.py")
)
assert _SPEC is not None and _SPEC.loader is not None
RANKS = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(RANKS)

FIGURES = (
    ("window_tok_per_s", "tok/s in window"),
    ("ttft_p90_ms", "TTFT p90 ms"),
    ("ttft_p50_ms", "TTFT p50 ms"),
    ("hit_rate", "hit rate"),
)


def doubled_ranks(values: list[float]) -> list[int]:
    """2 x each value's midrank (integers, ties averaged; h168's `ranks`)."""
    return [round(2 * rank) for rank in RANKS.ranks(values)]


def rank_sums(ranks: list[int], take: int) -> dict[int, int]:
    """How many ways `take` of `ranks` sum to each total."""
    ways: list[dict[int, int]] = [collections.Counter() for _ in range(take + 1)]
    ways[0][0] = 1
    for rank in ranks:
        for k in range(take, 0, -1):
            for total, count in ways[k - 1].items():
                ways[k][total + rank] += count
    return ways[take]


def exact(groups: list[tuple[list[float], list[float]]]) -> float:
    """Two-sided p of the summed rank sums of the first sides about their mean."""
    observed, mean, dist = 0, 0.0, {0: 1}
    for a, b in groups:
        ranks = doubled_ranks(a + b)
        observed += sum(ranks[: len(a)])
        mean += len(a) * (len(a) + len(b) + 1)
        within = rank_sums(ranks, len(a))
        merged: dict[int, int] = collections.Counter()
        for x, cx in dist.items():
            for y, cy in within.items():
                merged[x + y] += cx * cy
        dist = merged
    total = sum(dist.values())
    far = sum(c for s, c in dist.items() if abs(s - mean) >= abs(observed - mean) - 1e-9)
    return far / total


def main() -> None:
    out, tags, base, br = sys.argv[1], sys.argv[2].split(","), sys.argv[3], sys.argv[4]
    runs = []
    for tag in tags:
        for path in glob.glob(f"{out}/{tag}_*.json"):
            side = os.path.basename(path)[:-5].split("_")[2]
            with open(path) as file:
                runs += [(side, row) for row in json.load(file)["results"]]
    print(f"| figure | seed | {base} median [range] | {br} median [range] | n | p |")
    print("|---|---|---|---|--:|--:|")
    seeds = sorted({row["seed"] for _, row in runs})
    for key, label in FIGURES:
        groups = []
        for seed in seeds:
            a = [row[key] for side, row in runs if side == base and row["seed"] == seed]
            b = [row[key] for side, row in runs if side == br and row["seed"] == seed]
            groups.append((a, b))
            cells = [f"{statistics.median(v):.4g} [{min(v):.4g}-{max(v):.4g}]" for v in (a, b)]
            print(f"| {label} | {seed} | {cells[0]} | {cells[1]} | {len(a)}/{len(b)} "
                  f"| {exact([(a, b)]):.3f} |")  # fmt: skip
        print(f"| {label} | strat | | | | {exact(groups):.4f} |")


main()

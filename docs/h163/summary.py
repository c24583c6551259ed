"""Summary of /tmp/h163/out runs: per-run rows and exact MW (plain per seed, stratified over seeds)."""

import glob
import itertools
import json
import os
import statistics
import sys

OUT = os.environ.get("H162_OUT", "/tmp/h163/out")
FIGS = [
    ("window_tok_per_s", "tok/s in window"),
    ("ttft_p90_ms", "TTFT p90 ms"),
    ("ttft_p50_ms", "TTFT p50 ms"),
    ("hit_rate", "hit rate"),
]


def load(tag):
    runs = []
    for path in sorted(
        glob.glob(f"{OUT}/{tag}_*.json"), key=lambda p: int(os.path.basename(p).split("_")[1])
    ):
        name = os.path.basename(path)[:-5]
        side = name.split("_")[2]
        for row in json.load(open(path))["results"]:
            runs.append((name, side, row["seed"], row))
    return runs


def ustat(a, b):
    return sum((x > y) + 0.5 * (x == y) for x in a for y in b)


def mw_strat(groups):
    """groups: list of (a, b) per stratum; exact two-sided p of the summed U about its mean."""
    obs = sum(ustat(a, b) for a, b in groups)
    mean = sum(len(a) * len(b) / 2 for a, b in groups)
    dists = []
    for a, b in groups:
        pool = a + b
        dist = [
            ustat([pool[i] for i in idx], [pool[j] for j in range(len(pool)) if j not in idx])
            for idx in itertools.combinations(range(len(pool)), len(a))
        ]
        dists.append(dist)
    total = 0
    extreme = 0
    for combo in itertools.product(*dists):
        total += 1
        if abs(sum(combo) - mean) >= abs(obs - mean) - 1e-9:
            extreme += 1
    return extreme / total


def med(v):
    return f"{statistics.median(v):.3g}" if v and max(v) < 1 else f"{statistics.median(v):.1f}"


def rng(v):
    return f"[{min(v):.3g}–{max(v):.3g}]" if max(v) < 1 else f"[{min(v):.1f}–{max(v):.1f}]"


def main():
    tags = sys.argv[1].split(",")
    base = sys.argv[2]
    other = sys.argv[3]
    runs = [r for t in tags for r in load(t)]
    print("| run | seed | p50 | p90 | hit | tok/s window | requests | load |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for name, side, seed, row in runs:
        if side in (base, other):
            print(
                f"| {name} | {seed} | {row['ttft_p50_ms']:.1f} | {row['ttft_p90_ms']:.1f} | {row['hit_rate']:.3f} | {row['window_tok_per_s']:.1f} | {row['requests']} | {row['load']:.2f} |"
            )
    print()
    print(f"| figure | seed | {base} median [range] | {other} median [range] | n | p |")
    print("|---|---|---|---|--:|--:|")
    seeds = sorted({s for _, _, s, _ in runs})
    for key, label in FIGS:
        groups = []
        for seed in seeds:
            a = [r[key] for _, side, s, r in runs if side == base and s == seed]
            b = [r[key] for _, side, s, r in runs if side == other and s == seed]
            if not a or not b:
                continue
            groups.append((a, b))
            print(
                f"| {label} | {seed} | {med(a)} {rng(a)} | {med(b)} {rng(b)} | {len(a)}/{len(b)} | {mw_strat([(a, b)]):.3f} |"
            )
        if len(groups) > 1:
            print(f"| {label} | strat | | | | {mw_strat(groups):.3f} |")


main()

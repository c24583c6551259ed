"""Pair two routers' requests in `--requests` files (h170): same seed, rate, conversation, turn.

    python docs/h170/pairs.py A B FILE.jsonl [FILE.jsonl ...]

Per (seed, rate): each router's TTFT p50 / p90 (nearest rank, as the bench), the requests at
and above A's and B's p90 rank with their partners, the paired TTFT difference A - B for the
same placement (cached tokens within one 16-token block) and for different ones, and the
decode per token (token-weighted, paired median ratio); then all seeds together.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict
from typing import Any

BLOCK = 16


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(max(math.ceil(q * len(ordered)) - 1, 0), len(ordered) - 1)]


def sign_p(higher: int, n: int) -> float:
    """Exact two-sided sign test."""
    if n == 0:
        return 1.0
    k = min(higher, n - higher)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def load(paths: list[str]) -> dict[tuple[int, float, str], dict[tuple[int, int], dict[str, Any]]]:
    runs: dict[tuple[int, float, str], dict[tuple[int, int], dict[str, Any]]] = defaultdict(dict)
    for path in paths:
        with open(path) as lines:
            rows = [json.loads(line) for line in lines]
        for row in rows:
            if row["error"]:
                continue
            runs[(row["seed"], row["rate"], row["router"])][(row["conversation"], row["turn"])] = (
                row
            )
    return runs


def tpot(row: dict[str, Any]) -> float | None:
    steps = row["completion_tokens"] - 1
    return (row["total_s"] - row["ttft_s"]) / steps if steps > 0 else None


def label(row: dict[str, Any]) -> str:
    share = row["cached_tokens"] / row["prompt_tokens"]
    return f"{row['kind']}/t{row['turn']} p{row['prompt_tokens']} c{share:.2f}"


def top(rows: dict[tuple[int, int], dict[str, Any]], q: float) -> list[tuple[int, int]]:
    ttfts = [r["ttft_s"] for r in rows.values()]
    cut = quantile(ttfts, q)
    return sorted(
        (k for k, r in rows.items() if r["ttft_s"] >= cut), key=lambda k: -rows[k]["ttft_s"]
    )


def describe(a: str, b: str, ra: dict, rb: dict, out: dict[str, list[float]]) -> None:
    ta = [r["ttft_s"] * 1000 for r in ra.values()]
    tb = [r["ttft_s"] * 1000 for r in rb.values()]
    print(
        f"  n {len(ta)} / {len(tb)}; p50 {quantile(ta, 0.5):.1f} / {quantile(tb, 0.5):.1f}; "
        f"p90 {quantile(ta, 0.9):.1f} / {quantile(tb, 0.9):.1f} ms "
        f"(rank {math.ceil(0.9 * len(ta))} / {math.ceil(0.9 * len(tb))})"
    )
    keys = sorted(set(ra) & set(rb))
    for name, rows in ((a, ra), (b, rb)):
        print(f"  at/above {name}'s p90 rank (TTFT ms {a} | {b}; {a} placement | {b} placement):")
        for k in top(rows, 0.9):
            x, y = ra.get(k), rb.get(k)
            fx = f"{x['ttft_s'] * 1000:6.1f}" if x else "   -  "
            fy = f"{y['ttft_s'] * 1000:6.1f}" if y else "   -  "
            print(f"    {k}: {fx} | {fy}   {label(x) if x else '-'} | {label(y) if y else '-'}")
    same, diff = [], []
    for k in keys:
        d = (ra[k]["ttft_s"] - rb[k]["ttft_s"]) * 1000
        (same if abs(ra[k]["cached_tokens"] - rb[k]["cached_tokens"]) <= BLOCK else diff).append(
            (k, d)
        )
    for name, group in (("same cached", same), ("cached differs", diff)):
        ds = [d for _, d in group]
        if ds:
            up = sum(d > 0 for d in ds)
            print(
                f"  {name}: {len(ds)} pairs, {a}-{b} median {statistics.median(ds):+.2f} ms, "
                f"mean {statistics.fmean(ds):+.2f}; higher {up}/{len(ds)} "
                f"(sign p {sign_p(up, len(ds)):.3g})"
            )
            out[name].extend(ds)
    more = sum(ra[k]["cached_tokens"] > rb[k]["cached_tokens"] + BLOCK for k in keys)
    less = sum(ra[k]["cached_tokens"] < rb[k]["cached_tokens"] - BLOCK for k in keys)
    print(f"  {a} cached more in {more} pairs, less in {less}")
    for name, rows in ((a, ra), (b, rb)):
        steps = sum(r["completion_tokens"] - 1 for r in rows.values())
        span = sum(r["total_s"] - r["ttft_s"] for r in rows.values())
        print(f"  {name}: token-weighted TPOT {span / steps * 1000:.2f} ms")
    ratios = [tpot(ra[k]) / tpot(rb[k]) for k in keys if tpot(ra[k]) and tpot(rb[k])]
    up = sum(r > 1 for r in ratios)
    print(
        f"  TPOT paired {a}/{b}: median {statistics.median(ratios):.3f}, "
        f"slower in {up}/{len(ratios)} "
        f"(sign p {sign_p(up, len(ratios)):.3g})"
    )
    out["tpot"].extend(ratios)


def main() -> None:
    a, b, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
    runs = load(paths)
    out: dict[str, list[float]] = defaultdict(list)
    cells = sorted({(s, r) for s, r, _ in runs})
    for seed, rate in cells:
        ra, rb = runs.get((seed, rate, a)), runs.get((seed, rate, b))
        if not ra or not rb:
            continue
        print(f"seed {seed}, rate {rate}:")
        describe(a, b, ra, rb, out)
    for name in ("same cached", "cached differs"):
        ds = out[name]
        if ds:
            up = sum(d > 0 for d in ds)
            print(
                f"all: {name}: {len(ds)} pairs, median {statistics.median(ds):+.2f} ms, "
                f"higher {up} "
                f"(sign p {sign_p(up, len(ds)):.3g})"
            )
    r = out["tpot"]
    if r:
        up = sum(x > 1 for x in r)
        print(
            f"all: TPOT paired median {statistics.median(r):.3f}, slower {up}/{len(r)} "
            f"(p {sign_p(up, len(r)):.3g})"
        )


if __name__ == "__main__":
    main()

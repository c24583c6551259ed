"""Pooled over runs: each side's TTFT p50 / p90 per seed from every request of every run
(`ab.sh`'s JSON lines), a request-level Mann-Whitney of the TTFTs (normal approximation;
requests of one run are not independent: a hint, not a proof), and the cached share.

python docs/h177/pooled.py OUT TAG[,TAG...] BASE BR"""

import glob
import json
import math
import sys


def pct(values: list[float], q: float) -> float:
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, round(q * (len(ranked) - 1)))]


def mw_normal(a: list[float], b: list[float]) -> float:
    """Two-sided p of Mann-Whitney U by the normal approximation (ties averaged)."""
    pooled = sorted((v, i) for i, v in enumerate(a + b))
    ranks = [0.0] * len(pooled)
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[pooled[k][1]] = (i + j) / 2 + 1
        i = j + 1
    u = sum(ranks[: len(a)]) - len(a) * (len(a) + 1) / 2
    mean = len(a) * len(b) / 2
    sd = math.sqrt(len(a) * len(b) * (len(a) + len(b) + 1) / 12)
    return math.erfc(abs(u - mean) / sd / math.sqrt(2))


def rows(out: str, tags: list[str], side: str) -> list[dict[str, object]]:
    found = []
    for tag in tags:
        for path in glob.glob(f"{out}/{tag}_*_{side}.jsonl"):
            with open(path) as lines:
                found += [json.loads(line) for line in lines]
    return [r for r in found if not r["error"]]


def main() -> None:
    out, tags, base, br = sys.argv[1], sys.argv[2].split(","), sys.argv[3], sys.argv[4]
    sides = {side: rows(out, tags, side) for side in (base, br)}
    print(
        f"| seed | kind | n {base} / {br} | p50 {base} → {br} | p90 {base} → {br} "
        f"| cached share | MW p (TTFT) |"
    )
    print("|---|---|---|---|---|---|--:|")
    seeds = sorted({r["seed"] for r in sides[base]})
    for seed in seeds:
        for kind in ("all", "chat", "shared", "doc"):
            picked = {
                side: [r for r in got if r["seed"] == seed and kind in ("all", r["kind"])]
                for side, got in sides.items()
            }
            t = {side: [r["ttft_s"] * 1000 for r in got] for side, got in picked.items()}
            share = {
                side: sum(r["cached_tokens"] for r in got)
                / max(1, sum(r["prompt_tokens"] for r in got))
                for side, got in picked.items()
            }
            print(
                f"| {seed} | {kind} | {len(t[base])} / {len(t[br])} "
                f"| {pct(t[base], 0.5):.0f} → {pct(t[br], 0.5):.0f} "
                f"| {pct(t[base], 0.9):.0f} → {pct(t[br], 0.9):.0f} "
                f"| {share[base]:.2f} → {share[br]:.2f} | {mw_normal(t[base], t[br]):.3f} |"
            )


main()

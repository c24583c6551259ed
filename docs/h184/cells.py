"""h184 scratch: per cell, precise against approximate over runs: median [range] of hit rate,
TTFT p50 and p90, and the exact two-sided Mann-Whitney p (docs/h175/mw.py's enumeration).

    python docs/h184/cells.py route RUN.json...      # the routing bench's --json files
    python docs/h184/cells.py mocker TABLE.md...     # bench_precise_mocker's printed tables
"""

import collections
import json
import statistics
import sys


def exact_p(a, b):
    import itertools

    def u(x, y):
        return sum(1.0 if i > j else 0.5 if i == j else 0.0 for i in x for j in y)

    pooled, n = a + b, len(a)
    centre = n * len(b) / 2
    seen = abs(u(a, b) - centre)
    hits = total = 0
    for chosen in itertools.combinations(range(len(pooled)), n):
        left = [pooled[i] for i in chosen]
        right = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        total += 1
        hits += abs(u(left, right) - centre) >= seen - 1e-9
    return hits / total


def rows_route(paths):
    cells = collections.defaultdict(list)
    for p in paths:
        for r in json.load(open(p))["results"]:
            mode = "precise" if "precise" in r["router"] else "approximate"
            cells[(r["seed"], r["rate"], mode)].append(
                (r["hit_rate"], r["ttft_p50_ms"], r["ttft_p90_ms"], r.get("load", 0))
            )
    return cells


def rows_mocker(paths):
    cells = collections.defaultdict(list)
    for p in paths:
        for line in open(p):
            f = [x.strip() for x in line.split("|")]
            if len(f) > 8 and f[2] in ("approximate", "precise"):
                cells[(0, float(f[1]), f[2])].append((float(f[4]), float(f[5]), float(f[6]), 0))
    return cells


def fmt(xs, d):
    return f"{statistics.median(xs):.{d}f} [{min(xs):.{d}f}–{max(xs):.{d}f}]"


def main():
    kind, paths = sys.argv[1], sys.argv[2:]
    cells = rows_route(paths) if kind == "route" else rows_mocker(paths)
    print(
        "| seed | rate | runs a side | hit rate A / P (p) | TTFT p50 ms A / P (p) | TTFT p90 ms A / P (p) |"
    )
    print("|--:|--:|--:|---|---|---|")
    keys = sorted({(s, r) for s, r, _ in cells})
    for s, r in keys + sorted({(None, r) for _, r in keys}, key=lambda k: k[1]):
        if s is None:
            a = [x for (ss, rr, m), v in cells.items() if rr == r and m == "approximate" for x in v]
            p = [x for (ss, rr, m), v in cells.items() if rr == r and m == "precise" for x in v]
            if len({ss for ss, rr, _ in cells if rr == r}) < 2:
                continue
        else:
            a, p = cells.get((s, r, "approximate"), []), cells.get((s, r, "precise"), [])
        if not a or not p:
            continue
        out = []
        for i, d in ((0, 3), (1, 0), (2, 0)):
            xa, xp = [x[i] for x in a], [x[i] for x in p]
            out.append(f"{fmt(xa, d)} / {fmt(xp, d)} ({exact_p(xa, xp):.3f})")
        print(
            f"| {'pooled' if s is None else s} | {r:g} | {len(a)} / {len(p)} | "
            + " | ".join(out)
            + " |"
        )


if __name__ == "__main__":
    main()

# A/B statistics over ab.sh run dirs: per seed figures from each run's r.json; exact two-sided Mann-Whitney.
import json, sys, glob, itertools
from collections import defaultdict


def U(x, y):
    return sum((a > b) + 0.5 * (a == b) for a in x for b in y)


def mw(a, b):
    allv = a + b
    n = len(a)
    mu = n * len(b) / 2
    d0 = abs(U(a, b) - mu)
    cnt = tot = 0
    for idx in itertools.combinations(range(len(allv)), n):
        s = set(idx)
        x = [allv[i] for i in idx]
        y = [allv[i] for i in range(len(allv)) if i not in s]
        tot += 1
        cnt += abs(U(x, y) - mu) >= d0 - 1e-9
    return cnt / tot


def med(v):
    v = sorted(v)
    k = len(v)
    return v[k // 2] if k % 2 else (v[k // 2 - 1] + v[k // 2]) / 2


FIG = (
    ("TTFT p50 ms", "ttft_p50_ms", "%.1f"),
    ("TTFT p90 ms", "ttft_p90_ms", "%.1f"),
    ("hit rate", "hit_rate", "%.3f"),
    ("out tok/s window", "window_tok_per_s", "%.0f"),
)
fig = defaultdict(list)
loads = defaultdict(list)
for root in sys.argv[1:]:
    for d in sorted(glob.glob(root + "/*-*")):
        arm = d.rsplit("-", 1)[1]
        data = json.load(open(d + "/r.json"))
        reg = data["meta"].get("regime", "?")
        for r in data["results"]:
            cell = f"{reg} {r['rate']:g} {r['router']}"
            for name, key, _ in FIG:
                fig[(cell, name, arm)].append(r[key])
            loads[(cell, arm)].append(r.get("load"))
for cell in sorted({k[0] for k in fig}):
    for name, key, f in FIG:
        a, b = fig[(cell, name, "base")], fig[(cell, name, "branch")]
        if not a or not b:
            continue
        print(
            f"| {cell} | {name} | {f % med(a)} [{f % min(a)}–{f % max(a)}] | {f % med(b)} [{f % min(b)}–{f % max(b)}] | {len(a)}/{len(b)} | {mw(a, b):.3f} |"
        )
    print(
        "  per run (base):",
        ", ".join("%.1f" % x for x in fig[(cell, "TTFT p50 ms", "base")]),
        "| (branch):",
        ", ".join("%.1f" % x for x in fig[(cell, "TTFT p50 ms", "branch")]),
    )
    print("  loads base", loads[(cell, "base")], "branch", loads[(cell, "branch")])

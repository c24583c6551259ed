# h136 scratch: A/B statistics (medians, ranges, exact two-sided Mann-Whitney) over ab.sh run dirs. Usage: python docs/h136/abstats.py DIR
import json, sys, glob, itertools, math
from collections import defaultdict


def q(v, p):
    v = sorted(v)
    return v[max(0, math.ceil(p * len(v)) - 1)] if v else 0


def mw(a, b):
    allv = a + b
    n = len(a)

    def U(x, y):
        return sum((xi > yi) + 0.5 * (xi == yi) for xi in x for yi in y)

    u0 = U(a, b)
    mu = n * len(b) / 2
    d0 = abs(u0 - mu)
    cnt = tot = 0
    for idx in itertools.combinations(range(len(allv)), n):
        s = set(idx)
        x = [allv[i] for i in idx]
        y = [allv[i] for i in range(len(allv)) if i not in s]
        tot += 1
        cnt += abs(U(x, y) - mu) >= d0 - 1e-9
    return cnt / tot


root = sys.argv[1]
fig = defaultdict(list)  # (cell, figure, arm) -> values per seed and run
for d in sorted(glob.glob(root + "/*-*")):
    arm = d.rsplit("-", 1)[1]
    for f in glob.glob(d + "/*.jsonl"):
        rows = [json.loads(l) for l in open(f)]
        by = defaultdict(list)
        for r in rows:
            by[(r["rate"], r["seed"])].append(r)
        for (rate, seed), rs in sorted(by.items()):
            cell = f"{f.split('/')[-1][:-6]} {rate:.0f}"
            t = [r["ttft_s"] * 1000 for r in rs if not r["error"]]
            fig[(cell, "p50", arm)].append(q(t, 0.5))
            fig[(cell, "p90", arm)].append(q(t, 0.9))
            fig[(cell, "cold", arm)].append(
                sum(r["cached_tokens"] < r["prompt_tokens"] / 2 for r in rs)
            )
            fig[(cell, "hit", arm)].append(
                sum(r["cached_tokens"] for r in rs) / sum(r["prompt_tokens"] for r in rs)
            )
med = lambda v: (
    sorted(v)[len(v) // 2]
    if len(v) % 2
    else (sorted(v)[len(v) // 2 - 1] + sorted(v)[len(v) // 2]) / 2
)
for cell in sorted({k[0] for k in fig}):
    for f in ("p50", "p90", "cold", "hit"):
        a, b = fig[(cell, f, "base")], fig[(cell, f, "fix")]
        fmt = (lambda v: "%.3f" % v) if f == "hit" else (lambda v: "%.1f" % v)
        print(
            f"| {cell} | {f} | {fmt(med(a))} [{fmt(min(a))}–{fmt(max(a))}] | {fmt(med(b))} [{fmt(min(b))}–{fmt(max(b))}] | {len(a)}/{len(b)} | {mw(a, b):.3f} |  base {', '.join(fmt(x) for x in a)}; fix {', '.join(fmt(x) for x in b)}"
        )

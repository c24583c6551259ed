"""h200: each request's placement in the approximate and the precise row of one traced
routing-bench run (docs/h200/run.sh ... trace): the chosen engine's load as the router saw
it (in flight, pending prefill tokens), the same from the load generator's records (requests
under way there, and those still before their first token), the predicted vs reported
cached tokens, and the TTFT; for the same request at equal cached tokens (within a block),
precise minus approximate.  Usage: python3 placements.py RUN_DIR [ROUTERS as given to --routers]"""

import glob
import json
import statistics
import sys

run = sys.argv[1]
reqs = [json.loads(line) for line in open(f"{run}/req.jsonl")]
traces = []
for path in glob.glob(f"{run}/trace.*.jsonl"):
    rows = [json.loads(line) for line in open(path)]
    rows = [r for r in rows if r["prompt"] >= 100]  # the bench's readiness probes are tiny
    rows.sort(key=lambda r: r["t"])
    traces.append(rows)
traces.sort(key=lambda rows: rows[0]["t"])  # the rows run in --routers order
routers = ["kinference", "kinference-precise"]
run_order = sys.argv[2].split(",") if len(sys.argv) > 2 else routers  # --routers order
by = {}
for router, rows in zip(run_order, traces):
    mine = sorted(
        (r for r in reqs if r["router"] == router and not r["error"]), key=lambda r: r["arrival_s"]
    )
    if len(mine) != len(rows):
        print(f"{router}: {len(mine)} requests, {len(rows)} decisions", file=sys.stderr)
    t0 = rows[0]["t"] - mine[0]["arrival_s"]
    bad = 0
    for q, d in zip(mine, rows):
        if (
            abs((d["t"] - t0) - q["arrival_s"]) > 0.05
            or not 0.7 < d["prompt"] / max(q["prompt_tokens"], 1) < 1.4
        ):
            bad += 1
        q["d"] = d
        q["ep"] = d["ep"]
    print(f"{router}: {len(mine)} requests matched, {bad} doubtful", file=sys.stderr)
    # load generator's view: requests under way on the engine at this arrival
    for q in mine:
        t = q["arrival_s"]
        on = [o for o in mine if o is not q and o["ep"] == q["ep"] and o["arrival_s"] < t]
        q["busy"] = sum(1 for o in on if o["arrival_s"] + o["total_s"] > t)
        q["prefilling"] = sum(1 for o in on if o["arrival_s"] + o["ttft_s"] > t)
        w = q["d"]["w"]
        q["min_inflight"] = min(v[0] for v in w.values()) if w else 0
        q["rinf"] = w.get(q["ep"], [0, 0])[0]
        q["rpend"] = w.get(q["ep"], [0, 0])[1]
    by[router] = {(q["conversation"], q["turn"], q["kind"]): q for q in mine}


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def mean(xs):
    return statistics.fmean(xs) if xs else float("nan")


for router in routers:
    qs = list(by[router].values())
    err = [q["d"]["cached"] - q["cached_tokens"] for q in qs]
    within = sum(1 for e in err if abs(e) <= 16) / len(err)
    over = sum(1 for e in err if e > 16) / len(err)
    under = sum(1 for e in err if e < -16) / len(err)
    tt = [q["ttft_s"] * 1000 - q["d"]["ttft"] for q in qs if q["d"]["ttft"] is not None]
    print(
        f"{router}: n {len(qs)}; TTFT p50 {med([q['ttft_s'] * 1000 for q in qs]):.1f} ms; "
        f"router's in flight on chosen (before) mean {mean([q['rinf'] for q in qs]):.2f}, "
        f"chosen = least in flight {sum(q['rinf'] <= q['min_inflight'] for q in qs) / len(qs):.2f}; "
        f"pending prefill on chosen median {med([q['rpend'] for q in qs]):.0f} tok; "
        f"load gen: under way {mean([q['busy'] for q in qs]):.2f}, prefilling {mean([q['prefilling'] for q in qs]):.2f}; "
        f"predicted cached within a block {within:.2f} (over {over:.2f}, under {under:.2f}); "
        f"observed-predicted TTFT median {med(tt):+.1f} ms"
    )
    counts = {}
    for q in qs:
        counts[q["ep"]] = counts.get(q["ep"], 0) + 1
    print("  per engine:", dict(sorted(counts.items())))

a, p = by["kinference"], by["kinference-precise"]
same = [k for k in a if k in p and abs(a[k]["cached_tokens"] - p[k]["cached_tokens"]) <= 16]
print(f"\npairs at equal cached tokens: {len(same)}")


def show(name, f):
    d = [f(p[k]) - f(a[k]) for k in same]
    print(
        f"  {name}: approx median {med([f(a[k]) for k in same]):.2f}, precise {med([f(p[k]) for k in same]):.2f}; "
        f"diff median {med(d):+.2f}, mean {mean(d):+.2f}"
    )


show("TTFT ms", lambda q: q["ttft_s"] * 1000)
show("router in flight on chosen", lambda q: q["rinf"])
show("router pending prefill tok on chosen", lambda q: q["rpend"])
show("load gen under way on chosen", lambda q: q["busy"])
show("load gen prefilling on chosen", lambda q: q["prefilling"])
show("predicted cached", lambda q: q["d"]["cached"])
show("reported cached", lambda q: q["cached_tokens"])
show("predicted - reported cached", lambda q: q["d"]["cached"] - q["cached_tokens"])
show("predicted TTFT ms", lambda q: q["d"]["ttft"] or 0)
show("predicted wait ms", lambda q: q["d"]["wait"])
show("sequences joined", lambda q: q["d"]["seq"])
# by the difference in load: does precise's extra TTFT go with more under way?
for lo, hi in ((-9, -1), (0, 0), (1, 9)):
    ks = [k for k in same if lo <= p[k]["busy"] - a[k]["busy"] <= hi]
    d = [1000 * (p[k]["ttft_s"] - a[k]["ttft_s"]) for k in ks]
    print(
        f"  under-way diff in [{lo},{hi}]: n {len(ks)}, TTFT diff median {med(d):+.1f} ms, mean {mean(d):+.1f}"
    )
for lo, hi in ((-9, -1), (0, 0), (1, 9)):
    ks = [k for k in same if lo <= p[k]["prefilling"] - a[k]["prefilling"] <= hi]
    d = [1000 * (p[k]["ttft_s"] - a[k]["ttft_s"]) for k in ks]
    print(
        f"  prefilling diff in [{lo},{hi}]: n {len(ks)}, TTFT diff median {med(d):+.1f} ms, mean {mean(d):+.1f}"
    )

# How much would precise's extra load on its chosen engines explain? Within each row, TTFT
# against the requests under way on the chosen engine at equal reported cached tokens
# (least squares over the row: ms per request under way, per 1k uncached tokens).
import numpy as np  # noqa: E402

for router in routers:
    qs = list(by[router].values())
    x = np.array([[1.0, q["busy"], (q["prompt_tokens"] - q["cached_tokens"]) / 1000] for q in qs])
    y = np.array([q["ttft_s"] * 1000 for q in qs])
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    print(
        f"{router}: TTFT ~ {coef[0]:.1f} + {coef[1]:.1f} ms x under way + {coef[2]:.1f} ms x 1k uncached tokens"
    )
more = sum(1 for k in same if p[k]["busy"] > a[k]["busy"])
less = sum(1 for k in same if p[k]["busy"] < a[k]["busy"])
print(
    f"pairs where precise's engine had more under way: {more}, fewer: {less}, equal: {len(same) - more - less}"
)
from math import comb  # noqa: E402


def sign_p(plus, minus):
    """Exact two-sided sign test."""
    n, k = plus + minus, min(plus, minus)
    return min(1.0, 2 * sum(comb(n, i) for i in range(k + 1)) / 2**n)


print(f"  sign test p {sign_p(more, less):.3g}")
eq = [k for k in same if p[k]["busy"] == a[k]["busy"] and p[k]["prefilling"] == a[k]["prefilling"]]
d = [1000 * (p[k]["ttft_s"] - a[k]["ttft_s"]) for k in eq]
print(
    f"  pairs with equal under way and prefilling: n {len(d)}, TTFT diff median {med(d):+.1f} ms, "
    f"precise later in {sum(x > 0 for x in d)}, sign test p {sign_p(sum(x > 0 for x in d), sum(x < 0 for x in d)):.3g}"
)
try:
    from scipy.stats import wilcoxon

    d = [p[k]["busy"] - a[k]["busy"] for k in same]
    print(f"  Wilcoxon signed-rank on the difference: p {wilcoxon(d).pvalue:.3g}")
    d = [
        p[k]["ttft_s"] - a[k]["ttft_s"]
        for k in same
        if p[k]["busy"] == a[k]["busy"] and p[k]["prefilling"] == a[k]["prefilling"]
    ]
    print(
        f"  pairs with equal under way and prefilling: n {len(d)}, TTFT diff median {1000 * statistics.median(d):+.1f} ms, Wilcoxon p {wilcoxon(d).pvalue:.3g}"
    )
except ImportError:
    pass
for lo, hi in ((0, 3000), (3000, 6000), (6000, 100000)):
    ks = [k for k in eq if lo <= a[k]["prompt_tokens"] < hi]
    d = [1000 * (p[k]["ttft_s"] - a[k]["ttft_s"]) for k in ks]
    print(f"  equal load, prompt {lo}-{hi} tokens: n {len(ks)}, TTFT diff median {med(d):+.1f} ms")

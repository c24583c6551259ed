# Historical (h154, 2026-12-07): ran on main `0eb9c46` (its branch `be297af`). The probes here patch
# functions that have since changed or gone; kept as the record of docs/benchmarks.md's
# `## h154` section, not maintained (run on `0eb9c46`).
import json, sys, glob, statistics as st, math, collections, os

runs = sorted(glob.glob("/tmp/h154/runs/" + (sys.argv[1] if len(sys.argv) > 1 else "r*") + "-*"))


def pct(xs, p):
    xs = sorted(xs)
    k = (len(xs) - 1) * p
    f = math.floor(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


data = {}  # run -> list of rows
for r in runs:
    f = f"{r}/req.jsonl"
    if os.path.exists(f):
        data[r] = [json.loads(l) for l in open(f)]
print("per run and cell: TTFT p50 / p90 ms, hit (cached/prompt), n")
cells = collections.defaultdict(dict)
for r, rows in data.items():
    v = r.rsplit("-", 1)[1]
    by = collections.defaultdict(list)
    for x in rows:
        if not x.get("error"):
            by[(x["rate"], x["seed"])].append(x)
    for (rate, seed), xs in sorted(by.items()):
        t = [x["ttft_s"] * 1e3 for x in xs]
        hit = sum(x["cached_tokens"] for x in xs) / max(sum(x["prompt_tokens"] for x in xs), 1)
        cells[(rate, seed)][os.path.basename(r)] = (pct(t, 0.5), pct(t, 0.9), hit, len(xs))
for c, rs in sorted(cells.items()):
    for r, (a, b, h, n) in rs.items():
        print(f"  rate {c[0]} seed {c[1]} {r:14s} {a:6.1f} {b:6.1f} {h:.3f} {n}")


# paired per request
def binom_p(k, n):
    if n == 0:
        return 1.0
    m = min(k, n - k)
    p = sum(math.comb(n, i) for i in range(0, m + 1)) / 2**n * 2
    return min(p, 1.0)


req = collections.defaultdict(lambda: {"base": [], "br": []})
for r, rows in data.items():
    v = r.rsplit("-", 1)[1]
    for x in rows:
        if x.get("error"):
            continue
        req[(x["rate"], x["seed"], x["conversation"], x["turn"])][v].append(x)
for rate in sorted({k[0] for k in req}):
    for label, same in (("all", False), ("same cached", True)):
        diffs = collections.defaultdict(list)
        for k, d in req.items():
            if k[0] != rate or not d["base"] or not d["br"]:
                continue
            cs = [x["cached_tokens"] for x in d["base"] + d["br"]]
            if same and max(cs) - min(cs) > 16:
                continue
            diff = st.median(x["ttft_s"] for x in d["br"]) - st.median(
                x["ttft_s"] for x in d["base"]
            )
            diffs["all"].append(diff * 1e3)
            diffs[d["base"][0]["kind"]].append(diff * 1e3)
        for kind, ds in sorted(diffs.items()):
            up = sum(1 for x in ds if x > 0)
            nz = sum(1 for x in ds if x != 0)
            print(
                f"rate {rate} {label:11s} {kind:12s} n {len(ds):4d} median br-base {st.median(ds):+6.2f} ms, higher {up}/{nz}, sign p {binom_p(up, nz):.3g}"
            )
import itertools


def mw_p(a, b):
    """exact two-sided Mann-Whitney p by enumeration (U statistic)."""
    allv = a + b
    n = len(a)

    def u(xs, ys):
        return sum((x > y) + 0.5 * (x == y) for x in xs for y in ys)

    u0 = u(a, b)
    mean = len(a) * len(b) / 2
    cnt = tot = 0
    for idx in itertools.combinations(range(len(allv)), n):
        s = set(idx)
        xs = [allv[i] for i in idx]
        ys = [allv[i] for i in range(len(allv)) if i not in s]
        tot += 1
        cnt += abs(u(xs, ys) - mean) >= abs(u0 - mean) - 1e-9
    return cnt / tot


print("per cell, base vs br: median (range) p50, p90, hit; exact MW p")
for c, rs in sorted(cells.items()):
    for j, name in ((0, "p50"), (1, "p90"), (2, "hit")):
        a = [v[j] for r, v in rs.items() if r.endswith("base")]
        b = [v[j] for r, v in rs.items() if r.endswith("br")]
        f = (lambda x: f"{x:.3f}") if j == 2 else (lambda x: f"{x:.1f}")
        print(
            f"  rate {c[0]} seed {c[1]} {name}: base {f(st.median(a))} ({f(min(a))}-{f(max(a))}) br {f(st.median(b))} ({f(min(b))}-{f(max(b))}) p {mw_p(a, b):.3f}"
        )
print("paired per (rate, seed), same cached:")
for rs in sorted({(k[0], k[1]) for k in req}):
    ds = []
    for k, d in req.items():
        if (k[0], k[1]) != rs or not d["base"] or not d["br"]:
            continue
        cs = [x["cached_tokens"] for x in d["base"] + d["br"]]
        if max(cs) - min(cs) > 16:
            continue
        ds.append(
            (st.median(x["ttft_s"] for x in d["br"]) - st.median(x["ttft_s"] for x in d["base"]))
            * 1e3
        )
    up = sum(x > 0 for x in ds)
    nz = sum(x != 0 for x in ds)
    print(
        f"  rate {rs[0]} seed {rs[1]} n {len(ds)} median {st.median(ds):+.2f} ms higher {up}/{nz} p {binom_p(up, nz):.3g}"
    )

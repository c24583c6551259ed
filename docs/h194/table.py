import json, sys, glob, statistics, itertools
from math import comb


def mw(a, b):
    # exact two-sided MW by enumeration of rank sums (small samples)
    allv = sorted(a + b)
    ranks = {}
    for v in set(allv):
        idx = [i + 1 for i, x in enumerate(allv) if x == v]
        ranks[v] = sum(idx) / len(idx)
    ra = sum(ranks[v] for v in a)
    n = len(a) + len(b)
    rs = [ranks[v] for v in allv]
    sums = [sum(c) for c in itertools.combinations(rs, len(a))]
    mean = len(a) * (n + 1) / 2
    return sum(1 for s in sums if abs(s - mean) >= abs(ra - mean) - 1e-9) / len(sums)


rows = {}
for path in sorted(glob.glob("docs/h194/r*.json")):
    d = json.load(open(path))
    tag = path.split("/")[-1][:-5]
    for r in d["results"]:
        print(
            f"{tag} seed {r['seed']} {r['key']:20s} {r['rate']:.0f} hit {r['hit_rate']:.3f} p50 {r['ttft_p50_ms']:.0f} p90 {r['ttft_p90_ms']:.0f} p99 {r['ttft_p99_ms']:.0f} tok/s {r['out_tok_per_s']:.0f} load {r['load']:.2f}"
        )
        rows.setdefault((r["key"], r["rate"]), []).append(r)
print()
keys = sorted({k for k, _ in rows})
rates = sorted({q for _, q in rows})
for q in rates:
    for fig in ("hit_rate", "ttft_p50_ms", "ttft_p90_ms", "out_tok_per_s"):
        line = [f"rate {q:.0f} {fig:14s}"]
        for k in keys:
            v = [r[fig] for r in rows.get((k, q), [])]
            if v:
                line.append(
                    f"{k}: {statistics.median(v):.3f} [{min(v):.3f}-{max(v):.3f}] n{len(v)}"
                )
        a = [r[fig] for r in rows.get(("kinference", q), [])]
        b = [r[fig] for r in rows.get(("kinference-precise", q), [])]
        if len(a) > 1 and len(b) > 1:
            line.append(f"p(approx vs precise) {mw(a, b):.3f}")
        c = [r[fig] for r in rows.get(("dynamo", q), [])]
        if len(a) > 1 and len(c) > 1:
            line.append(f"p(approx vs dynamo) {mw(a, c):.3f}")
        print("  ".join(line))

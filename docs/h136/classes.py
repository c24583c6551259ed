# h136 scratch: per (run, rate, seed) the p50s, classes (miss/slow/fast) and paired fast-hit TTFT deltas, kinference vs sglang-router.
# Usage: python docs/h136/classes.py REQUESTS.jsonl... (each file holds both routers; --requests of loadtest.bench_routing)
import json, sys, statistics as st
from collections import defaultdict


def cls(r):
    if r["error"]:
        return "err"
    if r["cached_tokens"] < r["prompt_tokens"] / 2:
        return "miss"
    return "slow" if r["ttft_s"] >= 0.040 else "fast"


allp = []
for f in sys.argv[1:]:
    rows = [json.loads(l) for l in open(f)]
    idx = defaultdict(dict)
    g = defaultdict(list)
    for r in rows:
        idx[(r["rate"], r["seed"], r["kind"], r["conversation"], r["turn"])][r["router"][:4]] = r
        g[(r["rate"], r["seed"], r["router"][:4])].append(r)
    for key in sorted({k[:2] for k in g}):
        K, S = g[key + ("kinf",)], g[key + ("sgla",)]
        pk = st.median([r["ttft_s"] * 1000 for r in K])
        ps = st.median([r["ttft_s"] * 1000 for r in S])
        c = lambda R: "/".join(str(sum(cls(r) == x for r in R)) for x in ("miss", "slow", "fast"))
        d = [
            (v["kinf"]["ttft_s"] - v["sgla"]["ttft_s"]) * 1000
            for k, v in idx.items()
            if k[:2] == key and len(v) == 2 and cls(v["kinf"]) == cls(v["sgla"]) == "fast"
        ]
        nd = sum(
            1
            for k, v in idx.items()
            if k[:2] == key and len(v) == 2 and cls(v["kinf"]) != cls(v["sgla"])
        )
        fk = st.median([r["ttft_s"] * 1000 for r in K if cls(r) == "fast"])
        fs = st.median([r["ttft_s"] * 1000 for r in S if cls(r) == "fast"])
        print(
            f"| {f.split('/')[-2]} | {key[0]:.0f} | {key[1]} | {pk:.1f} / {ps:.1f} ({pk / ps:.3f}) | {c(K)} / {c(S)} | {nd} | {fk:.1f} / {fs:.1f} | {len(d)} | {st.median(d):+.2f} |"
        )
        if not (f.startswith("r0") and key == (6.0, 1)):
            allp += d
print(
    "pooled paired fast-fast",
    len(allp),
    "median %+.2f mean %+.2f" % (st.median(allp), st.mean(allp)),
)

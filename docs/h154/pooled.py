# Historical (h154, 2026-12-07): ran on main `0eb9c46` (its branch `be297af`). The probes here patch
# functions that have since changed or gone; kept as the record of docs/benchmarks.md's
# `## h154` section, not maintained (run on `0eb9c46`).
import json, glob, statistics as st, collections, math


def binom_p(k, n):
    m = min(k, n - k)
    return min(sum(math.comb(n, i) for i in range(m + 1)) / 2**n * 2, 1.0)


req = collections.defaultdict(lambda: {"base": [], "br": []})
for r in glob.glob("/tmp/h154/runs/r[12]-*"):
    v = r.rsplit("-", 1)[1]
    for l in open(f"{r}/req.jsonl"):
        x = json.loads(l)
        if not x.get("error"):
            req[(x["rate"], x["seed"], x["conversation"], x["turn"])][v].append(x)
ds = []
for k, d in req.items():
    cs = [x["cached_tokens"] for x in d["base"] + d["br"]]
    if d["base"] and d["br"] and max(cs) - min(cs) <= 16:
        ds.append(
            (st.median(x["ttft_s"] for x in d["br"]) - st.median(x["ttft_s"] for x in d["base"]))
            * 1e3
        )
up = sum(x > 0 for x in ds)
nz = sum(x != 0 for x in ds)
print("pooled same cached", len(ds), f"{st.median(ds):+.2f}", up, nz, binom_p(up, nz))

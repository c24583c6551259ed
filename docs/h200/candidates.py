"""h200: each decision's candidates as the router saw them (in flight, predicted cached
tokens; docs/h200/trace, key "c"), per row of a traced run: how often the chosen worker was
busier than the least busy candidate and what predicted cache it bought there, and for the
same request in both rows at equal reported cached tokens, whether precise chose a busier
worker for a larger predicted gain.  Usage: python3 candidates.py RUN_DIR [ROUTERS]"""

import glob
import json
import statistics
import sys

run = sys.argv[1]
order = sys.argv[2].split(",") if len(sys.argv) > 2 else ["kinference", "kinference-precise"]
reqs = [json.loads(line) for line in open(f"{run}/req.jsonl")]
traces = []
for path in glob.glob(f"{run}/trace.*.jsonl"):
    rows = sorted((json.loads(x) for x in open(path)), key=lambda r: r["t"])
    traces.append([r for r in rows if r["prompt"] >= 100])
traces.sort(key=lambda rows: rows[0]["t"])
by = {}
for router, rows in zip(order, traces):
    mine = sorted(
        (r for r in reqs if r["router"] == router and not r["error"]), key=lambda r: r["arrival_s"]
    )
    for q, d in zip(mine, rows):
        q["d"] = d
    by[router] = {(q["conversation"], q["turn"], q["kind"]): q for q in mine if "d" in q}


def view(q):
    d = q["d"]
    inflight = {e: v[0] for e, v in d["w"].items()}
    cached = d["c"]
    least = min(inflight[e] for e in cached)
    idle = [e for e in cached if inflight[e] == least]
    best_idle = max(cached[e] for e in idle)
    return {
        "busier": inflight[d["ep"]] - least,  # requests in flight above the least busy
        "gain": cached[d["ep"]] - best_idle,  # predicted cached above the best least busy
        "holder": cached[d["ep"]] >= max(cached.values()) - 16,
    }


for router in order:
    qs = [q for q in by[router].values() if q["d"].get("c")]
    vs = [view(q) for q in qs]
    busier = [v for v in vs if v["busier"] > 0]
    print(
        f"{router}: {len(qs)} decisions; chose a busier worker than the least busy in {len(busier)} "
        f"({len(busier) / len(qs):.2f}), predicted gain there median {statistics.median([v['gain'] for v in busier]) if busier else 0:.0f} tokens, "
        f"with no gain (<= 1 block) in {sum(v['gain'] <= 16 for v in busier)}; chose the (or a) best-cached worker in {sum(v['holder'] for v in vs)}"
    )
a, p = by["kinference"], by["kinference-precise"]
same = [
    k
    for k in a
    if k in p
    and abs(a[k]["cached_tokens"] - p[k]["cached_tokens"]) <= 16
    and a[k]["d"].get("c")
    and p[k]["d"].get("c")
]
more = [k for k in same if view(p[k])["busier"] > view(a[k])["busier"]]
print(
    f"pairs at equal reported cached tokens: {len(same)}; precise chose relatively busier in {len(more)}, "
    f"approximate in {sum(view(a[k])['busier'] > view(p[k])['busier'] for k in same)}"
)
for k in more[:12]:
    pa, pp = view(a[k]), view(p[k])
    print(
        f"  {k}: approx busier +{pa['busier']:.0f} gain {pa['gain']:.0f} | precise busier +{pp['busier']:.0f} gain {pp['gain']:.0f};"
        f" cached reported {p[k]['cached_tokens']}; TTFT {1000 * a[k]['ttft_s']:.0f} vs {1000 * p[k]['ttft_s']:.0f} ms;"
        f" precise's candidates {[(round(p[k]['d']['w'][e][0]), round(c)) for e, c in sorted(p[k]['d']['c'].items())]}"
        f" approx's {[(round(a[k]['d']['w'][e][0]), round(c)) for e, c in sorted(a[k]['d']['c'].items())]}"
    )

"""summary.py RUNDIR... : per run: done, hit rate, p50/p90/p99, tok/s, hits > 150 ms
(cached >= half the prompt, h148's noise.py), probes (late / all) from the probe hook."""

import glob, json, sys, math
from itertools import combinations


def mw_p(a, b):
    """Exact two-sided Mann-Whitney p (all splits)."""
    pooled = a + b

    def u(xs, ys):
        return sum((x > y) + 0.5 * (x == y) for x in xs for y in ys)

    obs = u(a, b)
    mean = len(a) * len(b) / 2
    n = 0
    extreme = 0
    for idx in combinations(range(len(pooled)), len(a)):
        xs = [pooled[i] for i in idx]
        ys = [pooled[i] for i in range(len(pooled)) if i not in idx]
        n += 1
        extreme += abs(u(xs, ys) - mean) >= abs(obs - mean) - 1e-9
    return extreme / n


rows = []
for d in sys.argv[1:]:
    res = json.load(open(f"{d}/r.json"))["results"][0]
    reqs = [json.loads(l) for l in open(f"{d}/r.jsonl")]
    reqs = [r for r in reqs if not r["error"]]
    hits150 = sum(
        1 for r in reqs if r["cached_tokens"] >= r["prompt_tokens"] / 2 and r["ttft_s"] > 0.15
    )
    probes = [json.loads(l) for f in glob.glob(f"{d}/probes.*.jsonl") for l in open(f)]
    probes = list({(p["ep"], p["seq"], p["ttft"]): p for p in probes}.values())
    late = [p for p in probes if p["late"]]
    times = open(f"{d}/../../times").read() if False else ""
    rows.append(
        (
            d.split("/")[-1],
            res["requests"],
            res["hit_rate"],
            res["ttft_p50_ms"],
            res["ttft_p90_ms"],
            res["ttft_p99_ms"],
            res["out_tok_per_s"],
            hits150,
            len(late),
            len(probes),
            res.get("load"),
            sorted(round(p["ttft"]) for p in late),
        )
    )
for r in rows:
    print(
        f"{r[0]:24s} done {r[1]} hit {r[2]:.3f} p50 {r[3]:.1f} p90 {r[4]:.1f} p99 {r[5]:.0f} tok/s {r[6]:.0f} "
        f"hits>150 {r[7]} late probes {r[8]}/{r[9]} load {r[10]} late ttfts {r[11]}"
    )

"""h203 (lead): approximate vs precise rows per run, medians, exact two-sided MW, and the
same-request pairs (cached tokens within one block) — from /tmp/lead/runs/q*/ (docs/h203/q.sh)."""

import glob, itertools, json, statistics


def mw(a, b):
    allv = sorted(a + b)
    ranks = {}
    for v in set(allv):
        idx = [i + 1 for i, x in enumerate(allv) if x == v]
        ranks[v] = sum(idx) / len(idx)
    ra = sum(ranks[v] for v in a)
    n = len(a) + len(b)
    mean = len(a) * (n + 1) / 2
    sums = [sum(c) for c in itertools.combinations([ranks[v] for v in allv], len(a))]
    return sum(1 for s in sums if abs(s - mean) >= abs(ra - mean) - 1e-9) / len(sums)


rows = {}
for d in sorted(glob.glob("/tmp/lead/runs/q*")):
    times = open(f"{d}/times").read().split()
    for r in json.load(open(f"{d}/run.json"))["results"]:
        rows.setdefault(r["key"], []).append(r)
        print(
            f"{d[-2:]} seed {r['seed']} {r['key']:20s} hit {r['hit_rate']:.3f} p50 {r['ttft_p50_ms']:.1f} "
            f"p90 {r['ttft_p90_ms']:.1f} p99 {r['ttft_p99_ms']:.0f} tok/s {r['out_tok_per_s']:.0f} "
            f"({times[1]}–{times[5]}, load {times[3]}→{times[7]})"
        )
    reqs = [json.loads(l) for l in open(f"{d}/req.jsonl")]
    by = {}
    for q in reqs:
        by.setdefault(q["router"], {})[(q["conversation"], q["turn"], q["kind"])] = q
    a, p = by.get("kinference", {}), by.get("kinference-precise", {})
    same = [
        p[k]["ttft_s"] - a[k]["ttft_s"]
        for k in a
        if k in p and abs(p[k]["cached_tokens"] - a[k]["cached_tokens"]) <= 16
    ]
    print(
        f"   pairs at equal cached tokens: n {len(same)}, precise − approximate median {1000 * statistics.median(same):+.1f} ms"
    )
print()
for fig in ("hit_rate", "ttft_p50_ms", "ttft_p90_ms", "out_tok_per_s"):
    a = [r[fig] for r in rows["kinference"]]
    p = [r[fig] for r in rows["kinference-precise"]]
    print(
        f"{fig:14s} approximate {statistics.median(a):.3f} [{min(a):.3f}–{max(a):.3f}]  "
        f"precise {statistics.median(p):.3f} [{min(p):.3f}–{max(p):.3f}]  MW p {mw(a, p):.3f}"
    )

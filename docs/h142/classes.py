# per run and seed: misses / slow hits (>=40 ms) / fast hits, and the fast hits' p50; then paired fast hits base vs branch
import json, sys, glob, math, statistics
from collections import defaultdict


def q(v, p):
    v = sorted(v)
    return v[max(0, math.ceil(p * len(v)) - 1)] if v else 0


fast = defaultdict(lambda: defaultdict(list))
for root in sys.argv[1:]:
    for d in sorted(glob.glob(root + "/*-*")):
        arm = d.rsplit("-", 1)[1]
        by = defaultdict(list)
        for l in open(d + "/r.jsonl"):
            r = json.loads(l)
            by[(r["rate"], r["seed"])].append(r)
        for (rate, seed), rs in sorted(by.items()):
            ok = [r for r in rs if not r["error"]]
            miss = [r for r in ok if r["cached_tokens"] < r["prompt_tokens"] / 2]
            hits = [r for r in ok if r["cached_tokens"] >= r["prompt_tokens"] / 2]
            slow = [r for r in hits if r["ttft_s"] >= 0.04]
            fh = [r for r in hits if r["ttft_s"] < 0.04]
            for r in fh:
                fast[(rate, seed, r["kind"], r["conversation"], r["turn"])][arm].append(
                    r["ttft_s"] * 1000
                )
            print(
                f"{d.split('/')[-2]} {arm:6} {rate:g} s{seed}: p50 {q([r['ttft_s'] * 1000 for r in ok], 0.5):.1f} miss/slow/fast {len(miss)}/{len(slow)}/{len(fh)} fast p50 {q([r['ttft_s'] * 1000 for r in fh], 0.5):.1f} errors {len(rs) - len(ok)}"
            )
for R in sorted({k[0] for k in fast}):
    diffs = [
        statistics.median(v["branch"]) - statistics.median(v["base"])
        for k, v in fast.items()
        if k[0] == R and v["base"] and v["branch"]
    ]
    print(
        "rate",
        R,
        "paired fast hits, branch - base: n",
        len(diffs),
        "median %.2f mean %.2f ms" % (statistics.median(diffs), statistics.mean(diffs)),
    )

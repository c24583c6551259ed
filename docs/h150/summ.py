import json, glob, sys, statistics


def q(xs, p):
    xs = sorted(xs)
    k = (len(xs) - 1) * p
    f = int(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


for d in sorted(glob.glob("/tmp/h150/ab/*")):
    try:
        R = [json.loads(l) for l in open(d + "/r.jsonl")]
    except Exception:
        continue
    ok = [r for r in R if not r["error"]]
    tt = [r["ttft_s"] * 1000 for r in ok]
    hit = sum(r["cached_tokens"] for r in ok) / sum(r["prompt_tokens"] for r in ok)
    T = [json.loads(l) for f in glob.glob(d + "/tr.*.jsonl") for l in open(f)]
    fb = [x for x in T if x["k"] == "fb"]
    miss = [x for x in fb if x["pred"] >= 0.5 * x["pt"] and x["cached"] == 0]
    short = [x for x in fb if x["kept"] < x["held"] - 1]
    lrn = sorted({(x["slot"], x["lrn"]) for x in T if x["k"] == "settle" and x["lrn"]})
    docs0 = sum(1 for r in ok if r["kind"] == "doc" and r["cached_tokens"] == 0)
    print(
        f"{d.split('/')[-1]:16s} done {len(ok)} hit {hit:.3f} p50 {q(tt, 0.5):.0f} p90 {q(tt, 0.9):.0f} p99 {q(tt, 0.99):.0f} | pred-hit-rep0 {len(miss)} shortfalls {len(short)} docs cold {docs0} learned {lrn[:6]}"
    )

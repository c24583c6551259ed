"""h184 scratch: per run, the time from the client's send to the gateway's decision
(`pre`: HTTP receive, parse, and in precise mode the wait for the prompt's tokenization),
the decision itself, and the rest of the TTFT (dispatch to first token seen by the client),
p50 / p90 ms, and how many requests waited over 50 ms before their decision.

    python docs/h184/pre.py DIR SEEDS RATES ROUTERS   # the routing bench command's lists
"""

import glob
import json
import sys

import an


def q(xs, p):
    xs = sorted(xs)
    return xs[min(int(len(xs) * p), len(xs) - 1)] if xs else float("nan")


def main():
    d = sys.argv[1]
    seeds, rates, routers = (s.split(",") for s in sys.argv[2:5])
    order = [(int(s), float(r), ro) for s in seeds for r in rates for ro in routers]
    reqs = an.load(d + "/req.jsonl")
    starts = sorted(
        (json.loads(line) for f in glob.glob(d + "/bench.*.jsonl") for line in open(f)),
        key=lambda s: s["start"],
    )
    picks = [p for f in glob.glob(d + "/gw.*.jsonl") for p in an.load(f) if p["k"] == "pick"]
    for (seed, rate, router), s in zip(order, starts):
        rr = [
            dict(r, start=s["start"])
            for r in reqs
            if r["seed"] == seed and r["rate"] == rate and r["router"] == router
        ]
        an.join([p for p in picks if s["start"] - 1 <= p["t0"] <= s["end"] + 1], rr)
        rr = [r for r in rr if "pick" in r]
        pre = [(r["pick"]["t0"] - r["start"] - r["arrival_s"]) * 1e3 for r in rr]
        dec = [(r["pick"]["t1"] - r["pick"]["t0"]) * 1e3 for r in rr]
        rest = [r["ttft_s"] * 1e3 - a - b for r, a, b in zip(rr, pre, dec)]
        print(
            f"{d.rsplit('/', 1)[-1]} seed {seed} rate {rate:g} {router}: n={len(rr)} "
            f"pre {q(pre, 0.5):.1f}/{q(pre, 0.9):.1f} decision {q(dec, 0.5):.1f}/{q(dec, 0.9):.1f} "
            f"rest {q(rest, 0.5):.0f}/{q(rest, 0.9):.0f}; pre over 50 ms: {sum(x > 50 for x in pre)}"
        )


if __name__ == "__main__":
    main()

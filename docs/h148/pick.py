# pick.py RUNDIR SEED CONV TURN [ROUTER-ALSO]: the pick's candidates
import json, sys

d, seed, conv, turn = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
J = json.load(open(d + "/joined.json"))
o = next(
    o
    for o in J
    if o["seed"] == seed and o["req"]["conversation"] == conv and o["req"]["turn"] == turn
)
p, r = o["pick"], o["req"]
em = o["epmap"]
print(
    f"c{conv} t{turn} {r['kind']} at {r['arrival_s']:.2f}s prompt {r['prompt_tokens']} (est {p['prompt']:.0f}) ttft {r['ttft_s'] * 1000:.0f} cached {r['cached_tokens']} engine e{o['engine']} home {p['home']}"
)
keys = [
    "cached",
    "fp",
    "inflight",
    "seq",
    "pending",
    "prefill_ms_per_token",
    "prefill_base_ms",
    "service_ms",
    "pred",
    "wait",
    "own",
    "slot",
    "unsure",
    "share",
    "cost",
    "totals",
    "probes",
]
print("%-22s" % "endpoint" + "".join("%9s" % k[:8] for k in keys))
for i, ep in enumerate(p["ep"]):
    mark = "*" if i == p["pick"] else " "
    vals = []
    for k in keys:
        v = p.get(k)
        v = v[i] if v is not None else None
        vals.append("%9s" % ("-" if v is None else ("%.4g" % v)))
    print(f"{mark}e{em.get(ep, '?')} {ep[-12:]:>18}" + "".join(vals))
print("busy", p.get("busy"))
# what else was in flight on the chosen engine: requests picked to it that had not ended
ch = p["ep"][p["pick"]]
t = p["t"]
for q in J:
    if q["seed"] != seed:
        continue
    qp, qr = q["pick"], q["req"]
    if qp["ep"][qp["pick"]] == ch and qp["t"] < t and qp["t"] + qr["total_s"] > t - 0.0:
        print(
            f"   on it: c{qr['conversation']} t{qr['turn']} {qr['kind']} picked {qp['t'] - t:+.2f}s ends {qp['t'] + qr['total_s'] - t:+.2f}s ttft {qr['ttft_s'] * 1000:.0f} cached {qr['cached_tokens']}/{qr['prompt_tokens']}"
        )

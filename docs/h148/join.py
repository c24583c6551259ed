# join.py RUNDIR: pairs each kinference pick (trace) with its request (r.jsonl) per seed; writes RUNDIR/joined.json
import json, sys, glob, zlib

d = sys.argv[1]
reqs = [json.loads(l) for l in open(d + "/r.jsonl")]
files = sorted(glob.glob(d + "/tr.*.jsonl"), key=lambda f: json.loads(open(f).readline())["t"])
out = []
seeds = sorted({r["seed"] for r in reqs})
for seed, f in zip(seeds, files):
    picks = [json.loads(l) for l in open(f)]
    picks = [p for p in picks if "error" not in p]
    rs = sorted(
        [r for r in reqs if r["router"] == "kinference" and r["seed"] == seed],
        key=lambda r: r["arrival_s"],
    )
    warm = len(picks) - len(rs)
    # warm-up picks: the first ones with tiny prompts
    body = picks[warm:] if warm >= 0 else picks
    eng = {"%x" % zlib.crc32(f"{seed}/{i}".encode()): i for i in range(8)}
    t0 = body[0]["t"] - rs[0]["arrival_s"]
    bad = 0
    # greedy by time: match each request to the nearest unused pick with a close prompt size
    used = set()
    for r in rs:
        best = None
        for j, p in enumerate(body):
            if j in used:
                continue
            dt = abs(p["t"] - t0 - r["arrival_s"])
            size = abs(p["prompt"] - r["prompt_tokens"]) / max(r["prompt_tokens"], 1)
            c = dt + size * 0.5
            if best is None or c < best[0]:
                best = (c, j, dt, size)
        used.add(best[1])
        p = body[best[1]]
        if best[2] > 0.05 or best[3] > 0.3:
            bad += 1
        e = (
            eng.get(r["response_id"].split("-sim")[1].split("-")[0])
            if "-sim" in r["response_id"]
            else None
        )
        out.append({"seed": seed, "req": r, "pick": p, "engine": e, "dt": best[2], "size": best[3]})
    # endpoint -> engine map
    m = {}
    for o in out:
        if o["seed"] == seed and o["engine"] is not None:
            m.setdefault(o["pick"]["ep"][o["pick"]["pick"]], set()).add(o["engine"])
    amb = {k: v for k, v in m.items() if len(v) > 1}
    print(
        f"seed {seed}: picks {len(picks)} (warm-up {warm}) requests {len(rs)} doubtful pairs {bad} endpoint map ambiguous {amb}"
    )
    for o in out:
        if o["seed"] == seed:
            o["epmap"] = {k: min(v) for k, v in m.items()}
json.dump(out, open(d + "/joined.json", "w"))

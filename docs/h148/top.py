# top.py RUNDIR [N]: per seed, the N slowest of each router; kinference's with the pick's view
import json, sys, zlib, math

d = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 8
reg = json.load(open(d + "/r.json"))["meta"].get("regime", "?")
slowidx = 4 if reg == "mixed" else 99
J = json.load(open(d + "/joined.json"))
reqs = [json.loads(l) for l in open(d + "/r.jsonl")]


def eng(r):
    rid = r["response_id"]
    if "-sim" not in rid:
        return "?"
    h = rid.split("-sim")[1].split("-")[0]
    for i in range(8):
        if "%x" % zlib.crc32(f"{r['seed']}/{i}".encode()) == h:
            return f"e{i}{'s' if i >= slowidx else ''}"


def q(v, p):
    v = sorted(v)
    return v[min(max(math.ceil(p * len(v)) - 1, 0), len(v) - 1)]


for seed in sorted({r["seed"] for r in reqs}):
    for router in ("kinference", "sglang"):
        rs = [r for r in reqs if r["seed"] == seed and r["router"] == router and not r["error"]]
        if not rs:
            continue
        ttfts = [r["ttft_s"] * 1000 for r in rs]
        p90 = q(ttfts, 0.9)
        rank = sum(t > p90 for t in ttfts) + 1
        cold = sum(r["cached_tokens"] < r["prompt_tokens"] / 2 for r in rs)
        print(
            f"== seed {seed} {router.split()[0]}: n {len(rs)} p50 {q(ttfts, 0.5):.0f} p90 {p90:.0f} (rank {rank}) cold {cold}"
        )
        for r in sorted(rs, key=lambda r: -r["ttft_s"])[:N]:
            line = f"  {r['kind']:5} c{r['conversation']:<2} t{r['turn']} at {r['arrival_s']:5.2f}s ttft {r['ttft_s'] * 1000:6.0f} cached {r['cached_tokens']:>5}/{r['prompt_tokens']:<5} {eng(r)}"
            if router == "kinference":
                o = next(
                    o
                    for o in J
                    if o["seed"] == seed
                    and o["req"] is not None
                    and o["req"]["arrival_s"] == r["arrival_s"]
                )
                p = o["pick"]
                i = p["pick"]
                em = o["epmap"]
                line += f" | pred {p['pred'][i]:.0f} wait {p['wait'][i]:.0f} own {p['own'][i]:.0f} seq {p['seq'][i]:.0f} cost {p['cost'][i]:.0f}"
            print(line)

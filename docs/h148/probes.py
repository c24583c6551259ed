# probes.py RUNDIR...: every pick that joined as the pool's probe (probes=1 on the chosen), and the cheapest alternative
import json, sys

for d in sys.argv[1:]:
    J = json.load(open(d + "/joined.json"))
    for o in J:
        p, r = o["pick"], o["req"]
        i = p["pick"]
        if p.get("probes") and p["probes"][i]:
            alts = sorted((p["cost"][k], k) for k in range(len(p["ep"])) if k != i)
            c, k = alts[0]
            print(
                f"{d.split('/')[-1]:14} s{o['seed']} c{r['conversation']:<2} t{r['turn']} {r['kind']:6} at {r['arrival_s']:5.2f}s ttft {r['ttft_s'] * 1000:5.0f} cached {r['cached_tokens']}/{r['prompt_tokens']} "
                f"seq {p['seq'][i]:.0f} pred {p['pred'][i]:.0f} cost {p['cost'][i]:.0f} | next best: seq {p['seq'][k]:.0f} pred {p['pred'][k]:.0f} own {p['own'][k]:.0f} cost {c:.0f}; probes flagged {sum(p['probes'])}"
            )

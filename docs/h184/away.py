"""h184 scratch: Picks sent away from the candidate predicted to hold the most (> 64 tokens
more than the chosen one), per gateway trace: how many, tokens given up by the Pick's own
prediction, and the term that weighs most against the holder (holder minus chosen, ms):
load (base + busy + decode pressure: predicted minus wait and own prefill), wait (queue
and slot wait, memory wait included), doubt (the unknown batch's expected wait), and how
many of them had a memory wait (precise only) on the holder.

    python docs/h184/away.py DIR...
"""

import collections
import glob
import json
import sys


def main():
    for d in sys.argv[1:]:
        for f in sorted(glob.glob(f"{d}/gw.*.jsonl"), key=lambda f: open(f).readline()):
            picks = [json.loads(line) for line in open(f)]
            picks = [p for p in picks if p["k"] == "pick" and "eps" in p.get("cand", {})]
            if not picks:
                continue
            precise = any(p.get("pred") is not None for p in picks)
            away, given, why, mem = 0, 0.0, collections.Counter(), 0
            for p in picks:
                c = p["cand"]
                if p.get("ep") not in c["eps"]:
                    continue
                i = c["eps"].index(p["ep"])
                h = max(range(len(c["eps"])), key=lambda j: c["cached"][j])
                if c["cached"][h] - c["cached"][i] <= 64:
                    continue
                away += 1
                given += c["cached"][h] - c["cached"][i]

                def load(j):
                    return c["pred"][j] - c["wait"][j] - c["own"][j]

                terms = {
                    "load": load(h) - load(i),
                    "wait": c["wait"][h] - c["wait"][i],
                    "doubt": c["unsure"][h] - c["unsure"][i],
                }
                why[max(terms, key=terms.get)] += 1
                if (c.get("mem_ahead") or [0] * 9)[h]:
                    mem += 1
            print(
                f"{f.rsplit('/', 1)[-1]} {'P' if precise else 'A'}: {len(picks)} Picks, "
                f"{away} away from the holder ({given:.0f} tokens), largest term "
                f"{dict(why)}, memory wait on the holder {mem}"
            )


if __name__ == "__main__":
    main()

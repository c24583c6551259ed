"""Holders' occupancy at Pick from an H163_LOG file (one JSON line per decode_costs call:
occ = min(sequences / batch, 1) per candidate, cached tokens, prompt tokens, ms per token).
Usage: python docs/h163/occupancy.py /tmp/h163/out/occ_3.jsonl /tmp/h163/out/occ_9.jsonl"""

import json
import sys

for path in sys.argv[1:]:
    rows = [json.loads(line) for line in open(path)]
    short, long_ = [], []
    for x in rows:
        c = x["cached"]
        i = max(range(len(c)), key=lambda k: c[k])
        if c[i] > 0:
            saved = min(c[i], x["prompt"]) * x["per_token"][i]
            (short if saved < 60 else long_).append(x["occ"][i])
    for name, v in (("short-hit holders", short), ("long-hit holders", long_)):
        v = sorted(v)
        qs = [round(v[int(p * (len(v) - 1))], 3) for p in (0.1, 0.25, 0.5, 0.75, 0.9)]
        print(path, name, len(v), qs)
    for t in (0.125, 0.25, 0.375, 0.5):
        below = sum(o < t for o in short) / len(short)
        light = sum(max(0.0, 1 - o / t) for o in short) / len(short)
        print(f"  below {t}: {below:.3f} of short-hit holders, mean light share {light:.3f}")

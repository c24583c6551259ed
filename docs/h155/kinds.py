"""Per kind, pooled over runs and seeds: requests, TTFT p50/p90 ms, cached share, prompt tokens median, >300 ms."""

import glob
import json
import os
import statistics
import sys

OUT = os.environ.get("H155_OUT", "/tmp/h155/out")
tags, sides = sys.argv[1].split(","), sys.argv[2].split(",")


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


print("| side | kind | n | TTFT p50 / p90 ms | cached share | prompt tokens median | > 300 ms |")
print("|---|---|--:|---|--:|--:|--:|")
for side in sides:
    rows = []
    for tag in tags:
        for p in glob.glob(f"{OUT}/{tag}_*_{side}.jsonl"):
            rows += [json.loads(l) for l in open(p)]
    for kind in sorted({r["kind"] for r in rows}):
        k = [r for r in rows if r["kind"] == kind and not r["error"]]
        t = [r["ttft_s"] * 1000 for r in k]
        share = sum(r["cached_tokens"] for r in k) / max(1, sum(r["prompt_tokens"] for r in k))
        print(
            f"| {side} | {kind} | {len(k)} | {pct(t, 0.5):.0f} / {pct(t, 0.9):.0f} | {share:.2f} | {statistics.median(r['prompt_tokens'] for r in k):.0f} | {sum(x > 300 for x in t)} |"
        )

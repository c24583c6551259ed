"""h209: A (main d0465f5) vs B (trial 61983ee) on Dynamo's mockers, from /tmp/h209/runs/{A,B}N/
(docs/h209/run.sh). Per row: the bench's gateway CPU s / requests (deciding, PLAN.txt), TTFT
p50/p90, hit rate; median [range] per side, exact two-sided MW p; same-request TTFT pairs B - A.

    python docs/h209/table.py [RUNS_DIR]
"""

import glob
import itertools
import json
import re
import statistics
import sys

RUNS = sys.argv[1] if len(sys.argv) > 1 else "/tmp/h209/runs"


def mw(a: list[float], b: list[float]) -> float:
    """Exact two-sided Mann-Whitney p (midranks on ties), every split enumerated."""
    pooled = sorted(a + b)
    rank = {v: sum(i + 1 for i, x in enumerate(pooled) if x == v) / pooled.count(v) for v in pooled}
    ra = sum(rank[v] for v in a)
    mean = len(a) * (len(pooled) + 1) / 2
    sums = [sum(c) for c in itertools.combinations([rank[v] for v in pooled], len(a))]
    return sum(1 for s in sums if abs(s - mean) >= abs(ra - mean) - 1e-9) / len(sums)


def cpu_by_row(log: str) -> list[float | None]:
    """The CPU line printed before each row's summary line, in row order (None if none)."""
    out: list[float | None] = []
    pending = None
    for line in log.replace("\r", "\n").splitlines():
        if m := re.search(r"its processes used ([\d.]+) CPU s", line):
            pending = float(m.group(1))
        elif re.search(r"\] .* @ [\d.]+/s, seed \d+: \d+ ok", line):
            out.append(pending)
            pending = None
    return out


runs = []
for d in sorted(glob.glob(f"{RUNS}/[AB]*"), key=lambda p: open(f"{p}/times").read().split()[5]):  # run order
    try:
        res = json.load(open(f"{d}/run.json"))["results"]
    except (OSError, ValueError):
        print(f"{d}: no run.json (skipped)")
        continue
    times = open(f"{d}/times").read().split()
    cpus = cpu_by_row(open(f"{d}/log").read())
    reqs = [json.loads(line) for line in open(f"{d}/req.jsonl")]
    tag = d.rsplit("/", 1)[1]
    for r, cpu in zip(res, cpus, strict=True):
        r["cpu_ms_per_req"] = None if cpu is None else 1000 * cpu / r["requests"]
        r["cpu_s"] = cpu
        print(f"{tag:3s} seed {r['seed']} {r['key']:19s} n {r['requests']:3d} cpu {cpu} s "
              f"-> {r['cpu_ms_per_req'] or float('nan'):.2f} ms/req  hit {r['hit_rate']:.3f} "
              f"p50 {r['ttft_p50_ms']:.1f} p90 {r['ttft_p90_ms']:.1f}  "
              f"({times[5]}-{times[9]} UTC, load {times[7]}->{times[11]}, rc {times[13]})")
    runs.append((tag[0], tag, res, reqs))

print()
keys = ["kinference", "kinference-precise", "dynamo"]
figs = ["cpu_ms_per_req", "ttft_p50_ms", "ttft_p90_ms", "hit_rate"]
for key in keys:
    for fig in figs:
        side = {s: [r[fig] for t, _, res, _ in runs if t == s for r in res
                    if r["key"] == key and r.get(fig) is not None] for s in "AB"}
        if not side["A"] or not side["B"]:
            continue
        a, b = side["A"], side["B"]
        print(f"{key:19s} {fig:15s} A {statistics.median(a):8.3f} [{min(a):.3f}-{max(a):.3f}] n {len(a)}  "
              f"B {statistics.median(b):8.3f} [{min(b):.3f}-{max(b):.3f}] n {len(b)}  "
              f"B/A {statistics.median(b) / statistics.median(a) - 1:+.1%}  MW p {mw(a, b):.4f}")

print("\nsame-request TTFT pairs (same seed, same conversation/turn/kind), B - A, per row:")
for key in keys:
    diffs = []
    for seed in (1, 2):
        per = {s: [] for s in "AB"}
        for t, _, res, reqs in runs:
            if any(r["seed"] == seed for r in res):
                per[t].append({(q["conversation"], q["turn"], q["kind"]): q for q in reqs if q["router"] == key})
        for ra in per["A"]:
            for rb in per["B"]:
                diffs += [rb[k]["ttft_s"] - ra[k]["ttft_s"] for k in ra if k in rb]
    if diffs:
        print(f"  {key:19s} pairs {len(diffs)}, median {1000 * statistics.median(diffs):+.2f} ms, "
              f"B faster in {sum(d < 0 for d in diffs) / len(diffs):.0%}")

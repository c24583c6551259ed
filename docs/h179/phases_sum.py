"""h179: one watched run's decisions: thread CPU and phases (medians, µs; faults and
switches as counts), and the warm-up's CPU where H179_WARM ran.

    python docs/h179/phases_sum.py DIR...
"""

import glob
import json
import statistics
import sys

COUNTS = ("minflt", "majflt", "nivcsw")

for d in sys.argv[1:]:
    lines = [json.loads(ln) for f in glob.glob(f"{d}/watch.*.jsonl") for ln in open(f)]
    ph = [p for x in lines if x["kind"] == "decide" for p in x["phases"]]
    dec = [c for x in lines if x["kind"] == "decide" for c, _ in x["cpu_wall_ns"]]
    warm = [c for x in lines if x["kind"] == "warm" for c in x["cpu_ns"]]
    names = sorted({k for p in ph for k in p})
    print(
        f"{d}: {len(dec)} decisions, CPU median {statistics.median(dec) / 1e3:.1f} µs"
        + (f"; warm-up median {statistics.median(warm) / 1e3:.1f} µs ({len(warm)})" if warm else "")
    )
    print(
        "   "
        + ", ".join(
            f"{k} {statistics.median(p.get(k, 0) for p in ph) / (1 if k in COUNTS else 1e3):.1f}"
            for k in names
        )
    )

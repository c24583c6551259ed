"""h200: the rates each row's cost model had learned (the tracer's "rates" snapshots, every
10th decision): per-token prefill (ms per 1k tokens), prefill base and service ms, median over
workers, at the end of each third of the row; busy ms per sequence.
Usage: python3 learned.py RUN_DIR [ROUTERS]"""

import glob
import json
import math
import statistics
import sys

run = sys.argv[1]
order = sys.argv[2].split(",") if len(sys.argv) > 2 else ["kinference", "kinference-precise"]
traces = []
for path in glob.glob(f"{run}/trace.*.jsonl"):
    rows = sorted((json.loads(x) for x in open(path)), key=lambda r: r["t"])
    traces.append([r for r in rows if r["prompt"] >= 100])
traces.sort(key=lambda rows: rows[0]["t"])


def median(values):
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else float("nan")


for router, rows in zip(order, traces):
    snaps = [r["rates"] for r in rows if "rates" in r]
    for i in (len(snaps) // 3, 2 * len(snaps) // 3, len(snaps) - 1):
        r = snaps[i]
        per_token = median(r.get("prefill_ms_per_token", {}).values()) * 1000
        base = median(r.get("prefill_base_ms", {}).values())
        service = median(r.get("service_ms", {}).values())
        print(
            f"{router} snapshot {i + 1}/{len(snaps)}: prefill {per_token:.1f} ms per 1k tokens, base {base:.1f} ms, "
            f"service {service:.0f} ms, busy {r['busy_ms']:.2f} ms per sequence "
            f"(per worker per 1k: {[round(v * 1000, 1) for v in r.get('prefill_ms_per_token', {}).values()]})"
        )

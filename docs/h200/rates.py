"""h200: the cost model's prediction for the chosen worker, fitted per row and per half of the
run (predicted TTFT ~ a + b x uncached tokens + c x sequences joined): what per-token prefill
rate and per-sequence load each row's model had learned.  Usage: python3 rates.py RUN_DIR [ROUTERS]"""

import glob
import json
import sys

import numpy as np

run = sys.argv[1]
order = sys.argv[2].split(",") if len(sys.argv) > 2 else ["kinference", "kinference-precise"]
traces = []
for path in glob.glob(f"{run}/trace.*.jsonl"):
    rows = sorted((json.loads(x) for x in open(path)), key=lambda r: r["t"])
    traces.append([r for r in rows if r["prompt"] >= 100 and r["ttft"] is not None])
traces.sort(key=lambda rows: rows[0]["t"])
for router, rows in zip(order, traces):
    for name, part in (
        ("first half", rows[: len(rows) // 2]),
        ("second half", rows[len(rows) // 2 :]),
    ):
        x = np.array([[1.0, (r["prompt"] - r["cached"]) / 1000, r["seq"]] for r in part])
        y = np.array([r["ttft"] - r["wait"] for r in part])
        coef = np.linalg.lstsq(x, y, rcond=None)[0]
        print(
            f"{router} {name}: predicted TTFT - wait ~ {coef[0]:.1f} ms + {coef[1]:.1f} ms per 1k uncached tokens + {coef[2]:.1f} ms per sequence joined (n {len(part)})"
        )

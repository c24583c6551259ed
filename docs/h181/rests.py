"""Per side of an A/B (H180_PROBE=docs/h181/probe docs/h180/ab.sh OUT ...):
python docs/h181/rests.py OUT [--detail]

Per row-run (a picker process: OUT/<n>-<side>/watch.PID.jsonl, its "rests" lines) during the
workload: the most loop CPU spent applying prompts' rests (`PoolCaches.complete`/`claim`)
between two wake-ups of the probe's 1 ms ticker, the gaps with over 5 ms of it, the calls;
"with rests": only the row-runs where some rest was applied during the workload (the others
route 31 lazily tokenized prompts whose rests finish after it). Medians, ranges, exact MW p
(docs/h180/ab_sum.py)."""

import glob
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "h180"))
from ab_sum import report  # noqa: E402
from stalls import classify  # noqa: E402


def row(lines: list[dict]) -> dict[str, float]:
    gaps = [g for g in lines if g["kind"] == "rests" and g["phase"] == 1]
    stalls = [s for s in lines if s["kind"] == "stall" and s["phase"] == 1]
    return {
        "max_cpu_ms": max((g["cpu_ms"] for g in gaps), default=0.0),
        "over_5ms": sum(g["cpu_ms"] > 5 for g in gaps),
        "calls": sum(g["calls"] for g in gaps),
        "big_calls": sum(g["big"] for g in gaps),
        "work": sum(classify(s).startswith("work") for s in stalls),
    }


def main() -> None:
    sides: dict[str, list[dict[str, float]]] = {}
    for d in sorted(glob.glob(f"{sys.argv[1]}/*-*/")):
        side = os.path.basename(d.rstrip("/")).split("-", 1)[1]
        for f in sorted(glob.glob(f"{d}/watch.*.jsonl")):
            sides.setdefault(side, []).append(row([json.loads(ln) for ln in open(f)]))
    keys = ("max_cpu_ms", "over_5ms", "calls", "big_calls", "work")
    print("all row-runs:")
    report(sides, keys)
    print("row-runs with rests (a call over 1 ms) applied during the workload:")
    withrests = {s: [r for r in rows if r["big_calls"]] for s, rows in sides.items()}
    report({s: rows for s, rows in withrests.items() if rows}, keys)
    if "--detail" in sys.argv:
        for s, rows in sides.items():
            print(
                s,
                [
                    (round(r["max_cpu_ms"], 1), r["over_5ms"], r["work"])
                    for r in rows
                    if r["big_calls"]
                ],
            )


if __name__ == "__main__":
    main()

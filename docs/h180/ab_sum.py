"""Per side of an A/B (docs/h180/ab.sh OUT): python docs/h180/ab_sum.py OUT

Each picker process is one row-run (its DIR/watch.PID.jsonl). Per row-run: the workload's
stalls over 10 ms, those classed "work" (the loop thread's CPU ≥ half the lateness;
docs/h180/stalls.py), those whose samples show a numpy.ma import, and the run-queue wait
summed. Then per side the medians and ranges, and exact two-sided Mann-Whitney p of the
per-row-run counts (the pre-chosen figure: work stalls per row-run)."""

import glob
import json
import os
import statistics
import sys

from scipy.stats import mannwhitneyu

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stalls import classify  # noqa: E402


def runs(out: str) -> dict[str, list[dict[str, float]]]:
    sides: dict[str, list[dict[str, float]]] = {}
    for d in sorted(glob.glob(f"{out}/*-*/")):
        side = os.path.basename(d.rstrip("/")).split("-", 1)[1]
        for f in sorted(glob.glob(f"{d}/watch.*.jsonl")):
            lines = [json.loads(ln) for ln in open(f)]
            stalls = [s for s in lines if s["kind"] == "stall" and s["phase"] == 1]
            work = [s for s in stalls if classify(s).startswith("work")]
            ma = [s for s in stalls if any("ma/" in fr for x in s["samples"] for fr in x["stack"])]
            sides.setdefault(side, []).append(
                {
                    "stalls": len(stalls),
                    "work": len(work),
                    "numpy.ma": len(ma),
                    "core": sum(1 for s in stalls if classify(s) == "core"),
                    "wait_ms": sum(s["loop_wait_ms"] for s in stalls),
                    "work_cpu_ms": sum(s["loop_cpu_ms"] for s in work),
                }
            )
    return sides


def main() -> None:
    report(runs(sys.argv[1]), ("stalls", "work", "numpy.ma", "core", "wait_ms", "work_cpu_ms"))


def report(sides: dict[str, list[dict[str, float]]], keys: tuple[str, ...]) -> None:
    """Per side medians [ranges] and sums of each key; exact MW p between two sides."""
    for side, rows in sides.items():
        print(
            f"{side}: {len(rows)} row-runs; "
            + "; ".join(
                f"{k} median {statistics.median(r[k] for r in rows):.1f} "
                f"[{min(r[k] for r in rows):.0f}-{max(r[k] for r in rows):.0f}] sum {sum(r[k] for r in rows):.0f}"
                for k in keys
            )
        )
    if len(sides) == 2:
        (a, ra), (b, rb) = sides.items()
        for k in keys:
            p = mannwhitneyu([r[k] for r in ra], [r[k] for r in rb], method="exact").pvalue
            print(f"  {k}: {a} vs {b} exact MW p = {p:.4f}")


if __name__ == "__main__":
    main()

"""h184 scratch: the decision's wall time and thread CPU per Pick (Router.route, the probe's
own term recording included, in both modes alike), and within it the precise parts, p50 /
p90 / max ms per gateway trace (one gateway per (seed, rate, router) run).

    python docs/h184/cost.py DIR...
"""

import glob
import json
import sys


def q(xs, p):
    xs = sorted(xs)
    return xs[min(int(len(xs) * p), len(xs) - 1)] if xs else float("nan")


def main():
    parts = ("source", "match", "longest", "extend", "surviving", "room")
    for d in sys.argv[1:]:
        for f in sorted(glob.glob(f"{d}/gw.*.jsonl"), key=lambda f: open(f).readline()):
            recs = [json.loads(line) for line in open(f)]
            picks = [r for r in recs if r["k"] == "pick"]
            if not picks:
                continue
            precise = any(p.get("pred") is not None for p in picks)
            wall = [(p["t1"] - p["t0"]) * 1e3 for p in picks]
            cpu = [p.get("cpu", float("nan")) for p in picks]
            line = (
                f"{f.rsplit('/', 1)[-1]} {'P' if precise else 'A'} n={len(picks)} "
                f"wall {q(wall, 0.5):.2f}/{q(wall, 0.9):.2f}/{max(wall):.1f} "
                f"cpu {q(cpu, 0.5):.2f}/{q(cpu, 0.9):.2f}/{max(cpu):.1f}"
            )
            if precise:
                for part in parts:
                    xs = [p.get("ms", {}).get(part, 0.0) for p in picks]
                    line += f" | {part} {q(xs, 0.5):.2f}/{q(xs, 0.9):.2f}/{max(xs):.1f}"
            print(line)


if __name__ == "__main__":
    main()

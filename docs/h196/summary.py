"""h196: one line per (run, seed) of the Dynamo 3 req/s runs — TTFT, its part inside the
serving Dynamo frontend and outside it (nvext), hit rate, requests piled on a busy mocker
while another was nearly idle (expost.py's rule) and the gateway's CPU (cpu_sampler.py).

    python docs/h196/summary.py /tmp/h196/A1 /tmp/h196/B1 ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parents[1] / "h170"))
from occupancy import joined


def q(v: list[float], p: float) -> float:
    return float(np.quantile(np.array(v), p))


def gateway_cores(path: Path) -> list[float]:
    """The gateway's CPU (cores) over each of its lives in the samples, past its first 10 s."""
    if not path.exists():
        return []
    seen: dict[str, list[tuple[float, float]]] = {}
    for line in path.open():
        s = json.loads(line)
        for pid, (kind, cpu) in s["p"].items():
            if kind == "gateway":
                seen.setdefault(pid, []).append((s["t"], cpu))
    out = []
    for v in seen.values():
        v = [x for x in v if x[0] >= v[0][0] + 10]
        if len(v) > 10:
            out.append((v[-1][1] - v[0][1]) / (v[-1][0] - v[0][0]))
    return out


def main() -> None:
    for d in map(Path, sys.argv[1:]):
        runs = joined(str(d / "req.jsonl"), str(d / "side.jsonl"))
        cores = gateway_cores(d / "cpu.jsonl")
        for i, ((seed, router), rows) in enumerate(sorted(runs.items())):
            t = [r["ttft_ms"] for r in rows]
            o = [r["outside_ms"] for r in rows]
            f = [a - b for a, b in zip(t, o)]
            hit = sum(r["cached_tokens"] for r in rows) / sum(r["prompt_tokens"] for r in rows)
            workers = sorted({r["worker"] for r in rows})
            piled = 0
            for r in rows:
                at = r["arrival_s"]
                load = {
                    w: sum(
                        x is not r
                        and x["worker"] == w
                        and x["arrival_s"] <= at < x["arrival_s"] + x["total_s"]
                        for x in rows
                    )
                    for w in workers
                }
                piled += load[r["worker"]] >= 5 and min(load.values()) <= 2
            gw = f"{cores[i]:.3f}" if router == "kinference" and i < len(cores) else "-"
            print(
                f"| {d.name} | {seed} | {router} | {q(t, 0.5):.1f} / {q(t, 0.9):.1f} / {q(t, 0.99):.0f} "
                f"| {q(f, 0.5):.1f} / {q(f, 0.9):.1f} | {q(o, 0.5):.1f} / {q(o, 0.9):.1f} / {np.mean(o):.1f} "
                f"| {hit:.3f} | {piled} | {gw} |"
            )


if __name__ == "__main__":
    main()

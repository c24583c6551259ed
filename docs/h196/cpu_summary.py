"""h196: CPU per process kind in each engine arrangement, from cpu_sampler.py's samples.

    python docs/h196/cpu_summary.py CPU.jsonl

Each arrangement starts fresh mockers: a set of mocker pids is one router's fleet; its
window is while they all live. Printed per window: the arrangement (frontend-kv present:
Dynamo's KV router; frontend-rr: one round-robin frontend per mocker), its length and the
CPU each kind used in it (cores = CPU seconds per second of window).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def main() -> None:
    samples = [json.loads(line) for line in open(sys.argv[1])]
    seen: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for s in samples:
        for pid, (kind, cpu) in s["p"].items():
            seen[pid].append((s["t"], cpu, kind))
    mockers = {pid: v for pid, v in seen.items() if v[0][2] == "mocker"}
    fleets: dict[float, list[str]] = defaultdict(list)
    for pid, v in mockers.items():
        fleets[round(v[0][0] / 20)].append(pid)  # started together (within ~20 s)
    for _, pids in sorted(fleets.items()):
        t0 = max(mockers[p][0][0] for p in pids) + 5  # past start-up
        t1 = min(mockers[p][-1][0] for p in pids) - 3  # before the stop
        if t1 - t0 < 10:
            continue
        use: dict[str, float] = defaultdict(float)
        count: dict[str, int] = defaultdict(int)
        for pid, v in seen.items():
            inside = [(t, c) for t, c, _ in v if t0 <= t <= t1]
            if len(inside) < 2:
                continue
            kind = v[0][2]
            use[kind] += inside[-1][1] - inside[0][1]
            count[kind] += 1
        kinds = ", ".join(f"{k} x{count[k]} {use[k] / (t1 - t0):.3f}" for k in sorted(use))
        arrangement = "kv-router" if count.get("frontend-kv") else "endpoints"
        total = sum(u for k, u in use.items() if k != "bench") / (t1 - t0)
        print(f"{arrangement}: window {t1 - t0:.0f} s, cores: {kinds}; all but bench {total:.3f}")


if __name__ == "__main__":
    main()

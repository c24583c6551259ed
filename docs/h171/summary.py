"""h171: per side, the idle and 1 req/s figures of `docs/h171/ab_idle.sh`'s runs (JSON lines
of loadtest.bench_idle_cpu): gateway CPU s/min (mean of 4), redis-server CPU s/min, Redis
calls/s in all and XADD/s. Usage: python docs/h171/summary.py OUT"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main(out: Path) -> None:
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for path in sorted(out.glob("*-*.txt")):
        for line in path.read_text().splitlines():
            if line.startswith("{"):
                run = json.loads(line)
                rows.setdefault((run["window"], run["label"]), []).append(run)
    for (window, label), runs in sorted(rows.items()):
        cells = [_cell(run) for run in runs]
        print(f"{window:8} {label:5} " + " | ".join(cells))


def _cell(run: dict[str, Any]) -> str:
    calls = run["redis_calls_per_s"]
    cpu = f"{run['gateway_cpu_s_per_min']:.2f} / {run['redis_cpu_s_per_min']:.2f}"
    return f"{cpu} / {sum(calls.values()):.0f} / {calls.get('xadd', 0):.1f}"


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""h196: sample the CPU time of the bench's processes every second (diagnostic).

    python docs/h196/cpu_sampler.py OUT.jsonl &   # stop it with kill PID

One JSON line per sample: t (unix), and per matching process pid, kind and CPU seconds
(utime + stime, children not included). Kinds: mocker, frontend-kv, frontend-rr, gateway,
bench. `cpu_summary.py` turns it into CPU per process kind and arrangement.
"""

from __future__ import annotations

import json
import os
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def kind(cmd: str) -> str | None:
    if "dynamo.mocker" in cmd:
        return "mocker"
    if "dynamo.frontend" in cmd:
        return "frontend-kv" if "--router-mode kv" in cmd else "frontend-rr"
    if "kinference" in cmd and "gateway" in cmd:
        return "gateway"
    if "bench_routing" in cmd or "nvext_run" in cmd:
        return "bench"
    return None


def sample() -> dict[str, list[object]]:
    out: dict[str, list[object]] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            k = kind(cmd)
            if k is None:
                continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[pid] = [k, (int(fields[11]) + int(fields[12])) / TICK]
        except OSError:
            continue
    return out


def main() -> None:
    with open(sys.argv[1], "a") as out:
        while True:
            out.write(json.dumps({"t": time.time(), "p": sample()}) + "\n")
            out.flush()
            time.sleep(1.0)


if __name__ == "__main__":
    main()

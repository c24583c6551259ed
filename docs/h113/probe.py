"""Stamp the Pick's steps (thread CPU) on bench_pick_replay's bodies; COLD=1 runs ~1 ms of
other Python + a 3 MiB memory sweep before each Pick. usage: probe.py N_ENDPOINTS ROUNDS"""

import asyncio, os, sys, time, json, re, statistics, functools, importlib
import loadtest.bench_pick_replay as bp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stamp"))
from h113common import pollute, wrap_specs

n = int(sys.argv[1])
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
bp.ENDPOINTS = tuple(f"127.0.0.1:{9101 + i}" for i in range(n))
COLD = int(os.environ.get("COLD", "0"))
acc = {}
SPECS = os.environ.get("SPECS", "").split()
wrap_specs(SPECS, acc)
per = {}
orig_pick = bp.LocalPicker.pick


async def pick(self, *a, **k):
    acc.clear()
    if COLD:
        pollute(2 if COLD >= 2 else 1)
    t = time.thread_time_ns()
    r = await orig_pick(self, *a, **k)
    acc["TOTAL"] = time.thread_time_ns() - t
    for key, v in acc.items():
        per.setdefault(key, []).append(v / 1000)
    return r


bp.LocalPicker.pick = pick


async def main():
    bodies = bp.bodies(600, 1)
    for _ in range(rounds):
        await bp.replay(bodies, 100)


asyncio.run(main())
print(f"n={n} cold={COLD} picks={len(per['TOTAL'])} load={open('/proc/loadavg').read().split()[0]}")
for key, v in sorted(per.items(), key=lambda kv: -statistics.median(kv[1])):
    print(
        f"  {key:45s} median {statistics.median(v):7.1f}  mean {statistics.fmean(v):7.1f}  calls {len(v)}"
    )
if os.environ.get("PCT"):
    for key in os.environ["PCT"].split(","):
        v = sorted(per[key])
        n_ = len(v)
        print(
            key,
            "p10/50/75/90/95/99/max:",
            " ".join(f"{v[int(q * (n_ - 1))]:.0f}" for q in (0.1, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)),
            "count>100:",
            sum(x > 100 for x in v),
        )

"""h181 scratch probe (not product): h180's loop-stall probe (docs/h180/watch), plus the CPU
the picker's loop spends applying lazily tokenized prompts' rests (`PoolCaches.complete`,
and `claim` when the rest came first) between two wake-ups of a 1 ms ticker on the loop.

With H180_WATCH=DIR and PYTHONPATH=docs/h181/probe (or H180_PROBE=docs/h181/probe for
docs/h180/ab.sh): in h180's DIR/watch.PID.jsonl, one "rests" line per ticker gap that held
such calls: {"phase", "gap_ms", "calls", "big" (calls over 1 ms of CPU), "cpu_ms"}.
"""

import importlib.util
import os
import sys

_H180 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "h180", "watch")
_spec = importlib.util.spec_from_file_location(
    "h180_watch", os.path.join(_H180, "sitecustomize.py")
)
h180 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(h180)  # h180's probe, installed as it runs


def _install() -> None:
    import asyncio
    import time

    from kinference import heap
    from kinference.kvcache import pool

    calls = [0, 0, 0.0]  # since the last wake-up: count, over 1 ms, thread CPU s

    def wrap(name):
        of = getattr(pool.PoolCaches, name)

        def timed(*a, **k):
            c0 = time.thread_time()
            try:
                return of(*a, **k)
            finally:
                cpu = time.thread_time() - c0
                calls[0] += 1
                calls[1] += cpu > 0.001
                calls[2] += cpu

        setattr(pool.PoolCaches, name, timed)

    for name in ("complete", "claim"):
        wrap(name)

    async def ticker():
        before = time.perf_counter()
        while True:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            if calls[0]:
                h180._LINES.append(
                    {
                        "kind": "rests",
                        "phase": h180._STATE["phase"],
                        "gap_ms": (now - before) * 1e3,
                        "calls": calls[0],
                        "big": calls[1],
                        "cpu_ms": calls[2] * 1e3,
                    }
                )
                calls[:] = [0, 0, 0.0]
            before = now

    of = heap.start_serving

    async def start_serving(*a, **k):
        result = await of(*a, **k)
        asyncio.get_running_loop().create_task(ticker())
        return result

    heap.start_serving = start_serving


if h180._D and "loadtest.picker_process" in getattr(sys, "orig_argv", []):
    _install()

"""The picker in its own process for benchmarks, with a probe of its event loop's lag.

    python -m loadtest.picker_process POLICY_FILE [--trace-stalls] [--nice N]

Runs the real server (`App` with the shipped settings, on uvloop, started as `kinference
serve` starts it) on 127.0.0.1:0 and prints its gRPC port on stdout. A 2 ms probe task on the
picker's loop records how late it wakes; each line `lag` on stdin answers one JSON line
`{"worst_ms": ..., "over_10ms": ...}` for the time since the previous one (and starts
over). End of stdin stops the picker. So a benchmark's load generator and stand-in engines,
in the parent process, share nothing with the loop they measure. `--trace-stalls` attributes
each stall over 10 ms (`loadtest.stall_trace`: the loop thread's stack sampled while the
probe is late, the collections it ran) and prints them on stderr at the end. `--nice N`
sets the picker's scheduling priority (every thread and parse worker it starts inherits
it) before it starts: on a machine shared with the benchmark's client and other work, a
negative N (CAP_SYS_NICE) gives its loop the core it waits for (docs/benchmarks.md, h180:
most of the stalls over 10 ms there were the loop runnable and waiting for a core).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import uvloop
from prometheus_client import CollectorRegistry

from kinference.app import App
from kinference.config import load_policy
from kinference.heap import start_serving
from kinference.settings import Settings
from loadtest.stall_trace import PERF_ENV, Stall, StallTrace

PROBE_S = 0.002  # the probe's sleep: short, so that a stall of a few ms shows
STALL_S = 0.010  # the bound on a stall


@dataclass
class LagProbe:
    worst_s: float = 0.0
    over: int = 0  # wake-ups later than STALL_S
    asked: float = field(default_factory=time.perf_counter)  # when the probe slept last
    # Each stall over STALL_S: when the probe slept, how late, the loop thread's CPU time
    # meanwhile and the whole process's: the loop's close to the lateness, the loop was
    # working; far below, it waited (for the GIL while another thread here ran, or a core).
    stalls: list[Stall] = field(default_factory=list)

    async def run(self) -> None:
        while True:
            self.asked = asked = time.perf_counter()
            cpu, process = time.thread_time(), time.process_time()
            await asyncio.sleep(PROBE_S)
            late = time.perf_counter() - asked - PROBE_S
            self.worst_s = max(self.worst_s, late)
            if late > STALL_S:
                self.over += 1
                loop_ms = (time.thread_time() - cpu) * 1000
                process_ms = (time.process_time() - process) * 1000
                self.stalls.append(Stall(asked, asked + PROBE_S, late * 1000, loop_ms, process_ms))

    def take(self) -> dict[str, float]:
        """The figures since the previous take, and start over."""
        taken = {"worst_ms": round(self.worst_s * 1000, 2), "over_10ms": self.over}
        self.worst_s, self.over = 0.0, 0
        return taken


async def serve(policy_file: Path, trace: bool) -> None:
    loop = asyncio.get_running_loop()
    settings = Settings(listen="127.0.0.1:0", metrics_listen="")
    app = App(settings, load_policy(policy_file), CollectorRegistry())
    await start_serving(app.start)  # as `App.serve` does: the startup heap frozen
    probe = LagProbe()
    task = asyncio.create_task(probe.run())
    tracer = StallTrace(lambda: probe.asked, PROBE_S) if trace else None
    if tracer is not None:
        tracer.start()
        tracer.names.update({t.native_id: t.name for t in threading.enumerate() if t.native_id})
        if os.environ.get(PERF_ENV):
            await asyncio.sleep(2)  # `perf record` attached before the workload begins
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    print(app.port, flush=True)
    try:
        while line := await stdin.readline():
            if line.strip() == b"lag":
                print(json.dumps(probe.take()), flush=True)
    finally:
        if tracer is not None:
            tracer.stop()  # before the probe stops: its last wake-up goes stale
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await app.server.stop(None)
        await app.close()
        if tracer is not None:
            tracer.report(probe.stalls)
            if out := os.environ.get(PERF_ENV):
                tracer.dump(probe.stalls, f"{out}.{os.getpid()}.json")


class PickerProcess:
    """The parent's side: starts this module with a policy, asks for the lag, stops it."""

    def __init__(self, process: asyncio.subprocess.Process, port: int) -> None:
        self.process = process
        self.port = port

    @classmethod
    async def start(
        cls, policy: Path, trace_stalls: bool = False, nice: int | None = None
    ) -> PickerProcess:
        """Starts a picker serving the policy file `policy` (at priority `nice`, if given)."""
        trace = ["--trace-stalls"] if trace_stalls else []
        priority = [] if nice is None else ["--nice", str(nice)]
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "loadtest.picker_process", str(policy), *trace, *priority,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        return cls(process, int(await _answer(process)))

    async def lag(self) -> tuple[float, int]:
        """The picker loop's worst stall (s) and its stalls over 10 ms since the last call."""
        assert self.process.stdin is not None
        self.process.stdin.write(b"lag\n")
        taken = json.loads(await _answer(self.process))
        return taken["worst_ms"] / 1000, int(taken["over_10ms"])

    async def aclose(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 30)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()


async def _answer(process: asyncio.subprocess.Process) -> bytes:
    assert process.stdout is not None
    line = await process.stdout.readline()
    if not line:
        raise RuntimeError(f"the picker process ended (exit {await process.wait()})")
    return line


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("policy", type=Path)
    cli.add_argument("--trace-stalls", action="store_true")
    cli.add_argument("--nice", type=int, help="this process's priority (-20..19)")
    args = cli.parse_args(argv)
    if args.nice is not None:  # before any thread starts: they all inherit it
        os.setpriority(os.PRIO_PROCESS, 0, args.nice)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    uvloop.run(serve(args.policy, args.trace_stalls))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The picker in its own process for benchmarks, with a probe of its event loop's lag.

    python -m loadtest.picker_process POLICY_FILE [--trace-stalls]

Runs the real server (`App` with the shipped settings, on uvloop, started as `kinference
serve` starts it) on 127.0.0.1:0 and prints its gRPC port on stdout. A 2 ms probe task on the
picker's loop records how late it wakes; each line `lag` on stdin answers one JSON line
`{"worst_ms": ..., "over_10ms": ...}` for the time since the previous one (and starts
over). End of stdin stops the picker. So a benchmark's load generator and stand-in engines,
in the parent process, share nothing with the loop they measure. `--trace-stalls` samples,
from a thread, the loop thread's stack every millisecond while the probe is over 10 ms late,
and prints (on stderr, at the end) the innermost picker frames those samples were in.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import uvloop
from prometheus_client import CollectorRegistry

from kinference.app import App
from kinference.config import load_policy
from kinference.heap import start_serving
from kinference.settings import Settings

PROBE_S = 0.002  # the probe's sleep: short, so that a stall of a few ms shows
STALL_S = 0.010  # the bound on a stall


@dataclass
class LagProbe:
    worst_s: float = 0.0
    over: int = 0  # wake-ups later than STALL_S
    asked: float = field(default_factory=time.perf_counter)  # when the probe slept last
    # Each stall over STALL_S: how late (ms), the loop thread's CPU time meanwhile and the
    # whole process's (ms): the loop's close to the lateness, the loop was working; far
    # below, it waited (for the GIL while another thread here ran, or for a core).
    stalls: list[tuple[float, float, float]] = field(default_factory=list)
    # With `threads` (tracing): per stall, each thread's time on a core and waiting for
    # one (ms, from /proc/thread-self schedstat), the busiest first.
    threads: bool = False
    scheds: list[str] = field(default_factory=list)

    async def run(self) -> None:
        while True:
            self.asked = asked = time.perf_counter()
            cpu, process = time.thread_time(), time.process_time()
            before = _schedstats() if self.threads else {}
            await asyncio.sleep(PROBE_S)
            late = time.perf_counter() - asked - PROBE_S
            self.worst_s = max(self.worst_s, late)
            if late > STALL_S:
                self.over += 1
                loop_ms = (time.thread_time() - cpu) * 1000
                self.stalls.append((late * 1000, loop_ms, (time.process_time() - process) * 1000))
                if self.threads:
                    self.scheds.append(_sched_delta(before, _schedstats(), late))

    def take(self) -> dict[str, float]:
        """The figures since the previous take, and start over."""
        taken = {"worst_ms": round(self.worst_s * 1000, 2), "over_10ms": self.over}
        self.worst_s, self.over = 0.0, 0
        return taken


def _schedstats() -> dict[str, tuple[int, int]]:
    """Thread `name/tid` -> (ns on a core, ns waiting for one)."""
    found, named = {}, {str(t.native_id): t.name for t in threading.enumerate()}
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            name = named.get(task.name) or (task / "comm").read_text().strip()
            run, wait, _ = (task / "schedstat").read_text().split()
            found[f"{name}/{task.name}"] = (int(run), int(wait))
    return found


def _sched_delta(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], late: float
) -> str:
    spent = {
        name: ((run - before[name][0]) / 1e6, (wait - before[name][1]) / 1e6)
        for name, (run, wait) in after.items()
        if name in before
    }
    busiest = sorted(spent.items(), key=lambda kv: -kv[1][0])[:3]
    parts = " ".join(f"{n} {r:.0f}+{w:.0f}" for n, (r, w) in busiest)
    return f"{late * 1000:.0f} ms: {parts}"


class StallSampler:
    """Samples the loop thread's stack while the probe is over STALL_S late."""

    def __init__(self, probe: LagProbe) -> None:
        self.probe = probe
        self.loop_thread = threading.get_ident()
        self.samples: Counter[str] = Counter()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self.stopped.wait(0.001):
            if time.perf_counter() - self.probe.asked < PROBE_S + STALL_S:
                continue
            frame = sys._current_frames().get(self.loop_thread)
            if frame is not None:
                self.samples[_where(traceback.extract_stack(frame))] += 1

    def report(self) -> None:
        self.stopped.set()
        stalls = ", ".join(f"{a:.0f}/{b:.0f}/{c:.0f}" for a, b, c in self.probe.stalls)
        print(f"stalls over 10 ms, late/loop CPU/process CPU (ms): {stalls}", file=sys.stderr)
        print("per stall, threads' ms on a core + waiting for one:", file=sys.stderr)
        for line in self.probe.scheds:
            print(f"  {line}", file=sys.stderr)
        print(f"stall samples (1 ms each): {self.samples.total()}", file=sys.stderr)
        for where, count in self.samples.most_common(25):
            print(f"{count:6d}  {where}", file=sys.stderr)


def _where(stack: traceback.StackSummary) -> str:
    """The innermost three frames in kinference, and the innermost frame at all."""
    ours = [f for f in stack if "/kinference/" in f.filename]
    named = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in ours[-3:]]
    last = stack[-1]
    return " < ".join(reversed(named)) + f" | {Path(last.filename).name}:{last.name}"


async def serve(policy_file: Path, trace: bool) -> None:
    loop = asyncio.get_running_loop()
    settings = Settings(listen="127.0.0.1:0", metrics_listen="")
    app = App(settings, load_policy(policy_file), CollectorRegistry())
    await start_serving(app.start)  # as `App.serve` does: the startup heap frozen
    probe = LagProbe(threads=trace)
    task = asyncio.create_task(probe.run())
    sampler = StallSampler(probe) if trace else None
    if sampler is not None:
        sampler.thread.start()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    print(app.port, flush=True)
    try:
        while line := await stdin.readline():
            if line.strip() == b"lag":
                print(json.dumps(probe.take()), flush=True)
    finally:
        if sampler is not None:
            sampler.stopped.set()  # before the probe stops: its last wake-up goes stale
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await app.server.stop(None)
        await app.close()
        if sampler is not None:
            sampler.report()


class PickerProcess:
    """The parent's side: starts this module with a policy, asks for the lag, stops it."""

    def __init__(self, process: asyncio.subprocess.Process, port: int) -> None:
        self.process = process
        self.port = port

    @classmethod
    async def start(cls, policy: Path, trace_stalls: bool = False) -> PickerProcess:
        """Starts a picker serving the policy file `policy`."""
        trace = ["--trace-stalls"] if trace_stalls else []
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "loadtest.picker_process", str(policy), *trace,
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
    args = cli.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    uvloop.run(serve(args.policy, args.trace_stalls))
    return 0


if __name__ == "__main__":
    sys.exit(main())

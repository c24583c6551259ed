"""Each event-loop stall of the picker process, attributed: a diagnostic for benchmarks.

`loadtest.picker_process --trace-stalls` runs one: a thread that, while the process's lag
probe is more than `SAMPLE_AFTER_S` late (the loop has not run its timer), samples the loop
thread's Python stack every millisecond (`sys._current_frames`), keyed by the probe's sleep
(one key = one stall); and a `gc.callbacks` hook that notes every collection the loop thread
runs (its generation, span, CPU time and what it freed). A stall is put on collections by
their CPU time, not their span: the span ends in a Python callback, where the loop thread
gives the GIL to a thread that waited through the collection, so it also counts that
thread's turn (docs/benchmarks.md, h167: spans of 6-27 ms over collections of 0.1-2.8 ms).
At the end, `report` prints one line per stall over the bound: how late, the loop thread's
CPU time meanwhile (close to the lateness: the loop worked; far below: it waited for the GIL
or a core), the collections inside it and the stack seen most (the innermost kinference
frames, the innermost frame at all and the outermost: the task or callback the loop was in),
then the stalls counted by cause.

A sample needs the GIL: a C call that holds it (a collection, a large parse) is seen at the
Python line that made it, once it returns. The sampler's own wake-ups take the GIL too (a
few µs each, only while the loop is late). Not part of the product: no setting, no metric.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SAMPLE_AFTER_S = 0.003  # past the probe's own sleep: a stall is sampled from here on
PERF_ENV = "STALL_TRACE_PERF"  # a path: `perf record` this process there (and PATH.json)
GC_KEPT = 20_000  # collections remembered (a deque: the oldest fall off)


@dataclass
class Stall:
    """One probe wake-up later than the bound."""

    asked: float  # perf_counter when the probe slept
    due: float  # when it should have woken
    late_ms: float
    loop_cpu_ms: float
    process_cpu_ms: float


@dataclass
class StallTrace:
    """Stacks and collections per stall; `probe_asked()` is when the probe last slept."""

    probe_asked: Callable[[], float]
    probe_s: float
    loop_thread: int = field(default_factory=threading.get_ident)
    samples: dict[float, Counter[str]] = field(default_factory=dict)
    others: dict[float, Counter[str]] = field(default_factory=dict)  # other threads' frames
    cpu: dict[float, dict[str, float]] = field(default_factory=dict)  # thread -> ms on a core
    names: dict[int, str] = field(default_factory=dict)  # native thread id -> Python name
    collections: deque[tuple[float, float, int, int, float]] = field(
        default_factory=lambda: deque(maxlen=GC_KEPT)
    )  # (start, end, generation, collected, CPU ms), on the loop thread
    stopped: threading.Event = field(default_factory=threading.Event)
    _gc_began: tuple[float, float] = (0.0, 0.0)  # perf_counter, thread_time

    perf: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        gc.callbacks.append(self._collection)
        threading.Thread(target=self._sample, name="stall-trace", daemon=True).start()
        if out := os.environ.get(PERF_ENV):  # every thread's native stacks, on the same clock
            command = ["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-F", "1999", "-g"]
            pid = str(os.getpid())
            self.perf = subprocess.Popen([*command, "-p", pid, "-o", f"{out}.{pid}"])

    def stop(self) -> None:
        self.stopped.set()
        if self._collection in gc.callbacks:
            gc.callbacks.remove(self._collection)
        if self.perf is not None:
            self.perf.send_signal(signal.SIGINT)
            self.perf.wait()

    def dump(self, stalls: list[Stall], path: str) -> None:
        """The stalls' windows and the threads' names, for `perf script`'s samples."""
        names = {**self.names, **{t.native_id: t.name for t in threading.enumerate()}}
        windows = [
            (
                s.due,
                s.due + s.late_ms / 1000,
                s.late_ms,
                s.loop_cpu_ms,
                self._top(s.asked),
                sum(cpu for _, _, _, cpu in self.gc_in(s.asked, s.due + s.late_ms / 1000)),
            )
            for s in stalls
        ]
        with open(path, "w") as out:
            json.dump({"stalls": windows, "threads": names, "loop": threading.get_native_id()}, out)

    def _collection(self, phase: str, info: dict[str, Any]) -> None:
        if threading.get_ident() != self.loop_thread:
            return
        now, cpu = time.perf_counter(), time.thread_time()
        if phase == "start":
            self._gc_began = (now, cpu)
        else:
            began, began_cpu = self._gc_began
            cpu_ms = (cpu - began_cpu) * 1000
            self.collections.append((began, now, info["generation"], info["collected"], cpu_ms))

    def _sample(self) -> None:
        episode, began = 0.0, {}
        while not self.stopped.wait(0.001):
            asked = self.probe_asked()
            if episode and asked != episode:  # the stall sampled last has ended
                self.cpu[episode] = _cpu_since(began)
                episode = 0.0
            if time.perf_counter() - asked < self.probe_s + SAMPLE_AFTER_S:
                continue
            if not episode:
                episode, began = asked, _thread_cpu()
            frames = sys._current_frames()
            frame = frames.pop(self.loop_thread, None)
            if frame is not None:
                where = _where(traceback.extract_stack(frame))
                self.samples.setdefault(asked, Counter())[where] += 1
            threads = threading.enumerate()
            self.names.update({t.native_id: t.name for t in threads if t.native_id})
            names = {t.ident: t.name for t in threads}
            seen = self.others.setdefault(asked, Counter())
            for ident, other in frames.items():
                if ident != threading.get_ident() and other.f_code.co_name != "wait":
                    where = _where(traceback.extract_stack(other)).rsplit(" | from", 1)[0]
                    seen[f"{names.get(ident, ident)}: {where}"] += 1

    def _top(self, asked: float) -> str:
        seen = self.samples.get(asked, Counter()).most_common(1)
        return seen[0][0] if seen else ""

    def gc_in(self, start: float, end: float) -> list[tuple[int, float, int, float]]:
        """(generation, span ms, collected, CPU ms) of the loop's collections overlapping
        [start, end]."""
        return [
            (gen, (b - a) * 1000, freed, cpu)
            for a, b, gen, freed, cpu in self.collections
            if b >= start and a <= end
        ]

    def report(self, stalls: list[Stall], out: Any = sys.stderr) -> None:
        """One line per stall, then the stalls counted by cause."""
        causes: Counter[str] = Counter()
        print(f"{len(stalls)} stalls over the bound (late / loop CPU / process CPU ms):", file=out)
        for stall in stalls:
            gcs = self.gc_in(stall.asked, stall.due + stall.late_ms / 1000)
            seen = self.samples.get(stall.asked, Counter())
            top = seen.most_common(2)
            gc_ms = sum(cpu for _, _, _, cpu in gcs)
            cause = _cause(gc_ms, stall, top)
            causes[cause] += 1
            cpu = self.cpu.get(stall.asked, {})
            busy = sorted(cpu.items(), key=lambda kv: -kv[1])[:3]
            others = self.others.get(stall.asked, Counter()).most_common(3)
            gc_text = " ".join(
                f"gen{g} {cpu:.1f}ms CPU ({ms:.1f} span)/{freed}"
                for g, ms, freed, cpu in gcs
                if ms >= 1
            )
            print(
                f"  {stall.late_ms:.1f} / {stall.loop_cpu_ms:.1f} / {stall.process_cpu_ms:.1f}"
                f" [{cause}] gc: {gc_text or '-'}; {seen.total()} samples:"
                + "".join(f"\n      {n} x {w}" for w, n in top)
                + "\n    threads' CPU (ms, from the stall's first sample on): "
                + ", ".join(f"{t} {ms:.1f}" for t, ms in busy)
                + "".join(f"\n      other: {n} x {w}" for w, n in others),
                file=out,
            )
        print("stalls by cause:", file=out)
        for cause, count in causes.most_common():
            print(f"  {count:4d}  {cause}", file=out)


def _cause(gc_ms: float, stall: Stall, top: list[tuple[str, int]]) -> str:
    if gc_ms >= stall.late_ms / 2:
        return "gc"
    if stall.loop_cpu_ms < stall.late_ms / 2:
        return "loop waited (GIL or core)"
    if not top:
        return "unsampled"
    inner = top[0][0].split(" | ")[0].split(" < ")[0]
    return inner.split(":")[0] + ":" + inner.split(" ", 1)[-1] if inner else top[0][0]


def _thread_cpu() -> dict[str, float]:
    """Each thread of this process (`comm/tid`) -> its ms on a core (schedstat)."""
    found, named = {}, {str(t.native_id): t.name for t in threading.enumerate()}
    for task in Path("/proc/self/task").iterdir():
        try:
            name = named.get(task.name) or (task / "comm").read_text().strip()
            found[f"{name}/{task.name}"] = int((task / "schedstat").read_text().split()[0]) / 1e6
        except OSError:
            continue
    return found


def _cpu_since(began: dict[str, float]) -> dict[str, float]:
    now = _thread_cpu()
    return {t: ms - began[t] for t, ms in now.items() if t in began and ms > began[t]}


def _where(stack: traceback.StackSummary) -> str:
    """The innermost three frames in kinference, the innermost frame, the outermost."""
    ours = [f for f in stack if "/kinference/" in f.filename]
    named = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in ours[-3:]]
    last, first = stack[-1], stack[0]
    return (
        " < ".join(reversed(named))
        + f" | {Path(last.filename).name}:{last.lineno} {last.name}"
        + f" | from {Path(first.filename).name}:{first.name}"
    )

"""Each traced stall of the picker's loop attributed to the thread that was on a core.

    STALL_TRACE_PERF=/tmp/run python -m loadtest.bench_precise_pick ... --trace-stalls
    python -m loadtest.stall_perf /tmp/run.PID [-v]

`loadtest.stall_trace` (with `STALL_TRACE_PERF` set) runs `perf record` on the picker
process (every thread's native stack, 1999 Hz, on CLOCK_MONOTONIC: the clock of Python's
`perf_counter`) and writes each stall's window beside it (`PATH.PID.json`). A stall whose
loop waited for the GIL cannot be sampled from Python (the sampler needs the GIL too); perf
sees who held it. Per stall, in this order: `gc` (the loop's collections' CPU time is half the
stall), `process off core` (its threads were on a core less than half the stall: the
machine was busy), `GIL held by the tokenizer thread` (it had at least the loop's samples),
else `loop's own work` named by the Python sampler's innermost kinference frame.
"""

from __future__ import annotations

import bisect
import json
import re
import subprocess
import sys
from collections import Counter, defaultdict
from typing import Any

HZ = 1999  # perf's sampling rate (stall_trace)
TOKENIZER = "kinference-tokenize"


def samples(data: str) -> list[tuple[float, int, str]]:
    """(time, thread id, innermost frame outside the kernel) of each perf sample."""
    fields = "comm,tid,time,ip,sym,dso"
    out = subprocess.run(
        ["perf", "script", "-i", data, "-F", fields], capture_output=True, text=True, check=True
    ).stdout
    found = []
    for block in out.split("\n\n"):
        lines = [line for line in block.split("\n") if line.strip()]
        head = re.match(r"\s*(\S.*?)\s+(\d+)\s+([\d.]+):", lines[0]) if lines else None
        if head is None:
            continue
        frames = [_frame(line) for line in lines[1:] if len(line.split(None, 1)) > 1]
        frames = [f for f in frames if "kallsyms" not in f] or ["kernel"]
        found.append((float(head.group(3)), int(head.group(2)), frames[0]))
    return sorted(found)


def _frame(line: str) -> str:
    frame = re.sub(r"\+0x[0-9a-f]+", "", line.split(None, 1)[1])
    return re.sub(r"\(/.*/([^/]+)\)", r"(\1)", frame)


def attribute(
    meta: dict[str, Any], seen: list[tuple[float, int, str]], verbose: bool
) -> Counter[str]:
    names = {int(k): v for k, v in meta["threads"].items()}
    times = [s[0] for s in seen]
    causes: Counter[str] = Counter()

    def who(tid: int) -> str:
        return "loop" if tid == meta["loop"] else names.get(tid, "other")

    for start, end, late, loop_cpu, top, gc_ms in meta["stalls"]:
        if not times or start < times[0]:
            causes["before perf attached"] += 1
            continue
        inside = seen[bisect.bisect_left(times, start) : bisect.bisect_right(times, end)]
        by = Counter(who(tid) for _, tid, _ in inside)
        frames: defaultdict[str, Counter[str]] = defaultdict(Counter)
        for _, tid, frame in inside:
            frames[who(tid)][frame] += 1
        busy_ms = sum(by.values()) * 1000 / HZ
        cause = _cause(late, gc_ms, busy_ms, by, top)
        causes[cause] += 1
        if verbose:
            threads = ", ".join(f"{w} {n}" for w, n in by.most_common(4))
            print(f"{late:6.1f} ms, loop CPU {loop_cpu:.1f} [{cause}] {threads}")
            for thread, counted in sorted(frames.items(), key=lambda kv: -kv[1].total())[:2]:
                print(f"    {thread}: " + "; ".join(f"{n}x {f}" for f, n in counted.most_common(3)))
    return causes


def _cause(late: float, gc_ms: float, busy_ms: float, by: Counter[str], top: str) -> str:
    if gc_ms >= late / 2:
        return "gc"
    if busy_ms < late / 2:
        return "process off core (machine busy)"
    if by[TOKENIZER] >= by["loop"]:
        return "GIL held by the tokenizer thread"
    inner = top.split(" | ", maxsplit=1)[0].split(" < ", maxsplit=1)[0] if top else ""
    return "loop's own work: " + (inner or (top.split(" | ")[1] if top else "unsampled"))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    data = args[0]
    with open(f"{data}.json") as meta_file:
        meta = json.load(meta_file)
    causes = attribute(meta, samples(data), "-v" in args)
    print(f"{causes.total()} stalls over 10 ms:")
    for cause, count in causes.most_common():
        print(f"  {count:4d}  {cause}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

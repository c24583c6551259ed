"""Classify the picker's loop stalls over 10 ms (docs/h180/watch): python docs/h180/stalls.py DIR...

Only the workload's stalls (phase 1: between the bench's first and second "lag" question).
Each stall's gap (the ticker's sleep to its late wake-up) is split into the loop thread's
CPU, its run-queue wait and the rest (asleep / blocked); a stall is
- "core": run-queue wait ≥ half the lateness (the loop was runnable, another task had the
  core); who had the cores: the bench client (parent) CPU, the picker's other threads, the
  parse workers, and the rest of the host's busy time (others, /proc/stat ticks: ±10 ms);
- "work: <where>": loop CPU ≥ half the lateness; <where> is the gc if collections took half
  the CPU, else the innermost kinference frame (or innermost frame) seen most in the samples;
- "blocked": neither (GIL held by another thread of the picker, a page-in, ...).
--detail prints every stall.
"""

import glob
import json
import sys
from collections import Counter, defaultdict


FAMILIES = (  # a "work" stall's samples -> what the loop was doing
    (
        ("ma/", "importlib", "inspect.py", "ast.py", "re/_", "tokenize.py"),
        "numpy.ma imported (np.unique's first call)",
    ),
    (("kvcache/",), "kvcache bookkeeping of 1 MiB prompts (pending.note/expect, ageing.touch)"),
    (("api/servicer.py",), "PushBody receive (body chunks)"),
)


def family(stall: dict) -> str | None:
    frames = [fr for x in stall["samples"] for fr in x["stack"]]
    for marks, name in FAMILIES:
        if any(m in fr for fr in frames for m in marks):
            return name
    return None


def where(stall: dict) -> str:
    seen: Counter[str] = Counter()
    for s in stall["samples"]:
        ours = [
            f
            for f in s["stack"]
            if f.startswith(
                ("kinference/", "requests/", "tokenize/", "bodies/", "api/", "routing/")
            )
        ]
        seen[(ours or s["stack"] or ["?"])[-1]] += 1
    return seen.most_common(1)[0][0] if seen else "unsampled"


def classify(s: dict) -> str:
    late = s["late_ms"]
    if s["loop_wait_ms"] >= late / 2:
        return "core"
    if s["loop_cpu_ms"] >= late / 2:
        gc_ms = sum(c for _, c in s["gc"])
        return "work: gc" if gc_ms >= s["loop_cpu_ms"] / 2 else f"work: {family(s) or where(s)}"
    return "blocked"


def main() -> None:
    dirs = [a for a in sys.argv[1:] if not a.startswith("--")]
    detail = "--detail" in sys.argv
    stalls = [
        json.loads(ln)
        for d in dirs
        for f in sorted(glob.glob(f"{d}/watch.*.jsonl"))
        for ln in open(f)
    ]
    stalls = [s for s in stalls if s["kind"] == "stall" and s["phase"] == 1]
    by: dict[str, list[dict]] = defaultdict(list)
    for s in stalls:
        by[classify(s)].append(s)
    keys = (
        "late_ms",
        "loop_cpu_ms",
        "loop_wait_ms",
        "client_cpu_ms",
        "picker_cpu_ms",
        "workers_cpu_ms",
        "host_busy_ms",
    )
    print(
        f"{len(stalls)} stalls over 10 ms in {', '.join(dirs)}; sums (ms): "
        + " ".join(k[:-3] for k in keys)
        + " others"
    )
    for cause, group in sorted(by.items(), key=lambda kv: -len(kv[1])):
        sums = {k: sum(s[k] for s in group) for k in keys}
        others = (
            sums["host_busy_ms"]
            - sums["client_cpu_ms"]
            - sums["picker_cpu_ms"]
            - sums["workers_cpu_ms"]
        )
        print(
            f"  {len(group):4d} {cause}: "
            + " ".join(f"{sums[k]:.0f}" for k in keys)
            + f" {others:.0f}"
            f"  (max late {max(s['late_ms'] for s in group):.1f})"
        )
        per: Counter[str] = Counter()
        for s in group:
            for k, v in s.get("threads_ms", {}).items():
                per[k.rsplit("/", 1)[0]] += v
        print(
            "       picker's other threads (ms): "
            + ", ".join(f"{k} {v:.0f}" for k, v in per.most_common(5))
        )
    if detail:
        for s in stalls:
            print(
                f"{s['late_ms']:6.1f} late: loop cpu {s['loop_cpu_ms']:5.1f} wait {s['loop_wait_ms']:5.1f}"
                f" slices {s['slices']}; client {s['client_cpu_ms']:5.1f} picker {s['picker_cpu_ms']:5.1f}"
                f" workers {s['workers_cpu_ms']:5.1f} host {s['host_busy_ms']:4.0f}; gc {s['gc']};"
                f" load {s['loadavg'].split()[0]} [{classify(s)}] threads {s.get('threads_ms')}"
            )
            seen = Counter(
                (x["state"], x["syscall"], x["running"], " < ".join(reversed(x["stack"][-3:])))
                for x in s["samples"]
            )
            for (state, sc, run, stack), n in seen.most_common(3):
                print(f"     {n} x {state} sys {sc} running {run}: {stack}")


if __name__ == "__main__":
    main()

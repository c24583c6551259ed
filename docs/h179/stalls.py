"""Summarise one watched run (docs/h179/watch): python docs/h179/stalls.py DIR [--detail]

Per run: the loop's lags over 40 / 100 ms (count, max) and, summed over those lags, the main
thread's CPU and run-queue wait between the tick before and the late tick (schedstat read on
the loop at every tick); the rest of a lag (neither) is the thread asleep or blocked. With
--detail, each watchdog stall: the main thread's state, syscall and Python stack when sampled,
every thread's CPU and wait over it, and the processes that used most CPU around it.
"""

import glob
import json
import sys


def main() -> None:
    d = sys.argv[1]
    detail = "--detail" in sys.argv
    lines = [json.loads(ln) for f in glob.glob(f"{d}/watch.*.jsonl") for ln in open(f)]
    lags = [x for x in lines if x["kind"] == "lag"]
    big = [x for x in lags if x["late_ms"] > 40]
    huge = [x for x in lags if x["late_ms"] > 100]
    gap = sum(x.get("gap_ms", 0) for x in big)
    cpu = sum(x.get("cpu_ms", 0) for x in big)
    wait = sum(x.get("wait_ms", 0) for x in big)
    mx = max((x["late_ms"] for x in lags), default=0)
    print(
        f"{d}: lags >40 ms {len(big)}, >100 ms {len(huge)}, max {mx:.0f} ms; over the >40 ms lags "
        f"(gap {gap:.0f} ms): main CPU {cpu:.0f} ms, run-queue wait {wait:.0f} ms, "
        f"other {gap - cpu - wait:.0f} ms"
    )
    for x in sorted(big, key=lambda x: -x["late_ms"])[:8]:
        print(
            f"   lag t={x['t']:6.2f}s late {x['late_ms']:6.1f}  gap {x.get('gap_ms', 0):6.1f}"
            f"  cpu {x.get('cpu_ms', 0):5.1f}  wait {x.get('wait_ms', 0):6.1f}  slices {x.get('slices')}"
        )
    if not detail:
        return
    for s in (x for x in lines if x["kind"] == "stall"):
        print(
            f"STALL t={s['t_last']:.2f}s span {s['span_ms']:.0f} ms, watchdog late up to "
            f"{s['over_max_ms']:.0f} ms, procs_running {s['procs_running']}, load {s['loadavg']}"
        )
        for k, v in s["threads"].items():
            if v["cpu_ms"] > 0.5 or v["wait_ms"] > 5:
                print(
                    f"     thread {k}: cpu {v['cpu_ms']:.1f} wait {v['wait_ms']:.1f} "
                    f"faults {v['minflt']}/{v['majflt']}"
                )
        seen = set()
        for smp in s["samples"]:
            key = (smp["state"], smp["syscall"], tuple(smp["stack"][-3:]))
            if key in seen:
                continue
            seen.add(key)
            print(
                f"     at {smp['at_ms']:.0f} ms: {smp['state']} syscall {smp['syscall']} "
                f"| {' > '.join(smp['stack'][-3:])}"
            )
        print(
            f"     top processes over {s.get('procs_window_ms') or 0:.0f} ms: "
            + "; ".join(f"{p[0]:.0f} ms {p[1]} {p[3][:60]}" for p in s.get("top_procs", [])[:8])
        )


if __name__ == "__main__":
    main()

"""h179: per watched run, the loop's lags, the decisions' CPU in the gateway and the TTFT
figures; per arm, medians and an exact two-sided Mann-Whitney p (enumeration).

    python docs/h179/ab_sum.py DIR...   (each DIR holds runs N-ARM/ as docs/h179/ab_rt.sh makes)
"""

import glob
import itertools
import json
import os
import statistics
import sys


def mw_exact(a, b):
    """Exact two-sided Mann-Whitney p by enumerating every split (small samples)."""
    pooled = a + b
    n = len(a)

    def u(xs, ys):
        return sum((x > y) + 0.5 * (x == y) for x in xs for y in ys)

    observed = u(a, b)
    mean = n * len(b) / 2
    count = total = 0
    for idx in itertools.combinations(range(len(pooled)), n):
        xs = [pooled[i] for i in idx]
        ys = [pooled[i] for i in range(len(pooled)) if i not in idx]
        total += 1
        count += abs(u(xs, ys) - mean) >= abs(observed - mean) - 1e-9
    return count / total


def ttfts(d):
    out = []
    for ln in open(f"{d}/req.jsonl"):
        r = json.loads(ln)
        v = r.get("ttft_ms", r.get("ttft"))
        if v is None and r.get("ttft_s") is not None:
            v = r["ttft_s"] * 1e3
        if v is not None:
            out.append(float(v))
    return sorted(out)


def pct(xs, q):
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def run(d):
    lines = [json.loads(ln) for f in glob.glob(f"{d}/watch.*.jsonl") for ln in open(f)]
    lags = [x for x in lines if x["kind"] == "lag"]
    big = [x for x in lags if x["late_ms"] > 40]
    dec = [c for x in lines if x["kind"] == "decide" for c in x["cpu_wall_ns"]]
    t = ttfts(d)
    return {
        "lags40": len(big),
        "lags100": sum(x["late_ms"] > 100 for x in lags),
        "lag_max": max((x["late_ms"] for x in lags), default=0.0),
        "lag_sum": sum(x["late_ms"] for x in big),
        "wait_in_lags": sum(x.get("wait_ms", 0) for x in big),
        "cpu_in_lags": sum(x.get("cpu_ms", 0) for x in big),
        "decide_cpu_p50": statistics.median(c / 1e3 for c, _ in dec) if dec else float("nan"),
        "decide_wall_p50": statistics.median(w / 1e3 for _, w in dec) if dec else float("nan"),
        "n": len(t),
        "p50": pct(t, 0.5),
        "p90": pct(t, 0.9),
        "p99": pct(t, 0.99),
        "max": t[-1] if t else 0,
        "rt": any(x["kind"] == "rt" for x in lines),
    }


def main():
    runs = {}
    for d in sys.argv[1:]:
        for r in sorted(glob.glob(f"{d}/*-*/")):
            arm = os.path.basename(r.rstrip("/")).split("-", 1)[1]
            try:
                runs.setdefault(arm, []).append((r, run(r)))
            except OSError as exc:
                print("skip", r, exc)
    keys = [
        "lags40",
        "lags100",
        "lag_max",
        "lag_sum",
        "wait_in_lags",
        "cpu_in_lags",
        "decide_cpu_p50",
        "decide_wall_p50",
        "p50",
        "p90",
        "p99",
        "max",
    ]
    for arm, rs in runs.items():
        for r, x in rs:
            print(
                arm,
                r,
                " ".join(
                    f"{k} {x[k]:.1f}" if isinstance(x[k], float) else f"{k} {x[k]}"
                    for k in keys + ["n", "rt"]
                ),
            )
    arms = list(runs)
    if len(arms) == 2:
        a, b = arms
        print(f"\n| figure | {a} median [range] | {b} median [range] | p |\n|---|---|---|--:|")
        for k in keys:
            xa = [x[k] for _, x in runs[a]]
            xb = [x[k] for _, x in runs[b]]
            fa = f"{statistics.median(xa):.1f} [{min(xa):.1f}–{max(xa):.1f}]"
            fb = f"{statistics.median(xb):.1f} [{min(xb):.1f}–{max(xb):.1f}]"
            print(f"| {k} | {fa} | {fb} | {mw_exact(xa, xb):.3f} |")


if __name__ == "__main__":
    main()

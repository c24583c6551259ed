"""summary.py TAG... : per run and seed: done, hit rate, TTFT p50/p90/p99, output tok/s in the window,
hits over 150 ms (cached >= half the prompt, h148's definition),
documents cold (document requests with under half the prompt cached; h150's column); then per figure base vs trial over
every (run, seed) figure: medians, ranges, n, exact two-sided Mann-Whitney p (all splits enumerated)."""

import glob, json, re, statistics, sys
from itertools import combinations


def u(xs, ys):
    return sum((x > y) + 0.5 * (x == y) for x in xs for y in ys)


def mw_p(a, b):
    pooled = a + b
    mean = len(a) * len(b) / 2
    obs = abs(u(a, b) - mean)
    total = extreme = 0
    for idx in combinations(range(len(pooled)), len(a)):
        s = set(idx)
        xs = [pooled[i] for i in idx]
        ys = [pooled[i] for i in range(len(pooled)) if i not in s]
        total += 1
        extreme += abs(u(xs, ys) - mean) >= obs - 1e-9
    return extreme / total


times = {}
for line in open("/tmp/h152/times"):
    m = re.match(r"(?:rc \d+ )?(\S+) (\d+) (base|trial) (start|end) (\S+) load (\S+)", line)
    if m:
        times.setdefault(f"{m[1]}-{m[2]}-{m[3]}", {})[m[4]] = (m[5], m[6])
FIG = ["hit_rate", "p50", "p90", "p99", "tok_s", "hits150", "docs_cold"]
for tag in sys.argv[1:]:
    figs = {"base": {f: [] for f in FIG}, "trial": {f: [] for f in FIG}}
    print(f"### {tag}")
    print(
        "| run | side | seed | done | hit rate | TTFT p50 / p90 / p99 ms | out tok/s window | hits > 150 ms | documents cold | UTC, load |"
    )
    print("|---|---|--:|--:|--:|---|--:|--:|--:|---|")
    for d in sorted(glob.glob(f"/tmp/h152/runs/{tag}-*"), key=lambda p: int(p.split("-")[-2])):
        name = d.split("/")[-1]
        run, side = name.split("-")[-2:]
        res = json.load(open(f"{d}/r.json"))["results"]
        reqs = [json.loads(l) for l in open(f"{d}/r.jsonl")]
        t = times.get(name, {})
        when = (
            f"{t['start'][0]}–{t['end'][0]}, {t['start'][1]} → {t['end'][1]}" if "end" in t else ""
        )
        for r in sorted(res, key=lambda r: r["seed"]):
            ok = [q for q in reqs if q["seed"] == r["seed"] and not q["error"]]
            cold = sum(
                1 for q in ok if q["kind"] == "doc" and q["cached_tokens"] < q["prompt_tokens"] / 2
            )
            h150 = sum(
                1 for q in ok if q["cached_tokens"] >= q["prompt_tokens"] / 2 and q["ttft_s"] > 0.15
            )
            vals = dict(
                hit_rate=r["hit_rate"],
                p50=r["ttft_p50_ms"],
                p90=r["ttft_p90_ms"],
                p99=r["ttft_p99_ms"],
                tok_s=r["window_tok_per_s"],
                hits150=h150,
                docs_cold=cold,
            )
            for f in FIG:
                figs[side][f].append(vals[f])
            print(
                f"| {run} | {side} | {r['seed']} | {r['requests']} (err {r['errors']}) | {r['hit_rate']:.3f} | "
                f"{r['ttft_p50_ms']:.1f} / {r['ttft_p90_ms']:.1f} / {r['ttft_p99_ms']:.0f} | {r['window_tok_per_s']:.0f} | {h150} | {cold} | {when} |"
            )
    print()
    print("| figure | base median [range] | trial median [range] | n | p |")
    print("|---|---|---|--:|--:|")
    for f in FIG:
        a, b = figs["base"][f], figs["trial"][f]
        if not a or not b:
            continue
        fmt = (lambda v: f"{v:.3f}") if f == "hit_rate" else (lambda v: f"{v:.1f}")
        print(
            f"| {f} | {fmt(statistics.median(a))} [{fmt(min(a))}–{fmt(max(a))}] | "
            f"{fmt(statistics.median(b))} [{fmt(min(b))}–{fmt(max(b))}] | {len(a)}/{len(b)} | {mw_p(a, b):.3f} |"
        )
    print()

# noise.py RUNDIR...: per router, each seed-run's p90, the slow non-document-cold requests, and MW p between routers
import json, sys, math, itertools


def q(v, p):
    v = sorted(v)
    return v[min(max(math.ceil(p * len(v)) - 1, 0), len(v) - 1)]


def mw(a, b):
    """Exact two-sided Mann-Whitney p: the share of all relabellings whose U is as far
    from its mean as the observed one (ties count a half)."""
    pooled, k = a + b, len(a)

    def u_of(left):
        chosen = set(left)
        xs = [pooled[i] for i in left]
        ys = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        return sum((x > y) + 0.5 * (x == y) for x in xs for y in ys)

    centre = k * len(b) / 2
    seen = abs(u_of(range(k)) - centre)
    splits = list(itertools.combinations(range(len(pooled)), k))
    return sum(abs(u_of(s) - centre) >= seen - 1e-9 for s in splits) / len(splits)


fig = {}
for d in sys.argv[1:]:
    reqs = [json.loads(l) for l in open(d + "/r.jsonl")]
    for router in ("kinference", "sglang"):
        for seed in sorted({r["seed"] for r in reqs}):
            rs = [r for r in reqs if r["router"] == router and r["seed"] == seed and not r["error"]]
            t = [r["ttft_s"] * 1000 for r in rs]
            colddoc = [
                r for r in rs if r["kind"] == "doc" and r["cached_tokens"] < r["prompt_tokens"] / 2
            ]
            rest = [r for r in rs if r not in colddoc]
            queued = [
                r
                for r in rest
                if r["cached_tokens"] >= r["prompt_tokens"] / 2 and r["ttft_s"] > 0.15
            ]
            coldslow = [
                r
                for r in rest
                if r["cached_tokens"] < r["prompt_tokens"] / 2 and r["ttft_s"] > 0.15
            ]
            fig.setdefault(router, []).append(
                (q(t, 0.9), len(rs), len(colddoc), len(queued), len(coldslow), q(t, 0.5))
            )
for router, v in fig.items():
    print(
        router,
        "p90s",
        [round(x[0]) for x in v],
        "n",
        [x[1] for x in v],
        "cold docs",
        [x[2] for x in v],
        "hits>150ms",
        [x[3] for x in v],
        "other colds>150ms",
        [x[4] for x in v],
        "sum hits>150",
        sum(x[3] for x in v),
    )
a = [x[0] for x in fig["kinference"]]
b = [x[0] for x in fig["sglang"]]
print(
    "p90 median kin %.0f sglang %.0f, MW p = %.3f; kin lower in %d of %d"
    % (
        sorted(a)[len(a) // 2],
        sorted(b)[len(b) // 2],
        mw(a, b),
        sum(x < y for x, y in zip(a, b)),
        len(a),
    )
)

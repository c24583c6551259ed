"""A/B table: python abtable.py (reads /tmp/h195/runs/ab-{a,b}-N/run.json and times)."""

import glob, itertools, json, statistics as st


def mw(a, b):  # exact two-sided Mann-Whitney by enumerating rank sums (docs/h194/table.py)
    allv = sorted(a + b)
    ranks = {}
    for v in set(allv):
        idx = [i + 1 for i, x in enumerate(allv) if x == v]
        ranks[v] = sum(idx) / len(idx)
    ra = sum(ranks[v] for v in a)
    n = len(a) + len(b)
    sums = [sum(c) for c in itertools.combinations([ranks[v] for v in allv], len(a))]
    mean = len(a) * (n + 1) / 2
    return sum(1 for s in sums if abs(s - mean) >= abs(ra - mean) - 1e-9) / len(sums)


rows = {"a": [], "b": []}
for path in sorted(glob.glob("docs/h195/ab/ab-*.json")):
    tag = path.split("/")[-1][:-5]
    side, i = tag.split("-")[1], int(tag.split("-")[2])
    times = open(path[:-5] + ".times").read().split()
    for r in json.load(open(path))["results"]:
        if r["key"] == "kinference-precise":
            rows[side].append(
                (
                    i,
                    r["seed"],
                    r["hit_rate"],
                    r["ttft_p50_ms"],
                    r["ttft_p90_ms"],
                    r["out_tok_per_s"],
                    f"{times[1]}–{times[5]} ({times[3]}→{times[7]})",
                )
            )
print("| side | run | seed | UTC (load) | hit | p50 ms | p90 ms | tok/s |")
print("|---|--:|--:|---|--:|--:|--:|--:|")
for side in "ab":
    for i, seed, hit, p50, p90, tok, when in sorted(rows[side]):
        print(
            f"| {'main' if side == 'a' else 'branch'} | {i} | {seed} | {when} | {hit:.3f} | {p50:.1f} | {p90:.1f} | {tok:.0f} |"
        )
for k, name in ((2, "hit rate"), (3, "TTFT p50 ms"), (4, "TTFT p90 ms"), (5, "output tok/s")):
    a = [r[k] for r in rows["a"]]
    b = [r[k] for r in rows["b"]]
    if a and b:
        p = mw(a, b)
        print(
            f"{name}: main {st.median(a):.3f} [{min(a):.3f}–{max(a):.3f}] n {len(a)}; branch {st.median(b):.3f} [{min(b):.3f}–{max(b):.3f}] n {len(b)}; p {p:.3g}"
        )

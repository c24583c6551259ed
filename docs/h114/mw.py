"""Exact two-sided Mann-Whitney (permutation of ranks) over A/B arm files; per in-flight level:
CPU ms/req, added TTFT p50, p90."""

import itertools, re, sys, glob, statistics


def mw_p(a, b):
    allv = a + b
    n = len(a)

    def u(x, y):
        return sum((1 if xi > yi else 0.5 if xi == yi else 0) for xi in x for yi in y)

    obs = u(a, b)
    mean = len(a) * len(b) / 2
    cnt = tot = 0
    for idx in itertools.combinations(range(len(allv)), n):
        s = set(idx)
        x = [allv[i] for i in idx]
        y = [allv[i] for i in range(len(allv)) if i not in s]
        tot += 1
        if abs(u(x, y) - mean) >= abs(obs - mean) - 1e-9:
            cnt += 1
    return cnt / tot


rows = {}
for d in sys.argv[1:]:
    for f in sorted(glob.glob(f"{d}/*.md")):
        arm = f.rsplit("-", 1)[1][:-3]
        for line in open(f):
            if line.startswith("| kinference"):
                c = [x.strip() for x in line.strip().strip("|").split("|")]
                lvl = c[1]
                rows.setdefault((lvl, arm), []).append(
                    (float(c[10]), float(c[5]), float(c[6]), float(c[2]))
                )
for lvl in sorted({k[0] for k in rows}, key=float):
    base, br = rows.get((lvl, "base"), []), rows.get((lvl, "branch"), [])
    for i, name in enumerate(["CPU ms/req", "added TTFT p50", "added TTFT p90", "TTFT p50"]):
        a = [r[i] for r in base]
        b = [r[i] for r in br]
        if not a or not b:
            continue
        print(
            f"in flight {lvl:>3} {name:15} base {statistics.median(a):.3f} ({min(a):.2f}-{max(a):.2f})  branch {statistics.median(b):.3f} ({min(b):.2f}-{max(b):.2f})  p={mw_p(a, b):.4f}  n={len(a)}/{len(b)}"
        )

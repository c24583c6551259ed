import sys, glob, re, itertools, statistics


def mw_p(a, b):
    # exact two-sided Mann-Whitney p by enumeration (U statistic)
    n, m = len(a), len(b)
    allv = a + b

    def U(x, y):
        return sum((1 if xi > yi else 0.5 if xi == yi else 0) for xi in x for yi in y)

    u = U(a, b)
    mu = n * m / 2
    cnt = tot = 0
    for idx in itertools.combinations(range(n + m), n):
        s = set(idx)
        x = [allv[i] for i in idx]
        y = [allv[i] for i in range(n + m) if i not in s]
        tot += 1
        if abs(U(x, y) - mu) >= abs(u - mu) - 1e-9:
            cnt += 1
    return cnt / tot


def main():
    rows = {}
    if __name__ != "__main__":
        pass
    for d in sys.argv[1:]:
        for f in sorted(glob.glob(f"{d}/*.md")):
            arm = f.rsplit("-", 1)[1][:-3]
            for line in open(f):
                c = [x.strip() for x in line.split("|")]
                if (
                    len(c) == 11
                    and c[1] in ("kinference", "engine (direct)")
                    and c[2] in ("whole", "streamed")
                ):
                    p50, p99, add50, add99, cpu1, cpu16, rps = (
                        c[3],
                        c[4],
                        c[5],
                        c[6],
                        c[7],
                        c[8],
                        c[9],
                    )
                    key = (c[1], c[2])
                    for name, v in (
                        ("p50@1", p50),
                        ("added p50@1", add50),
                        ("p99@1", p99),
                        ("CPU ms/req @1", cpu1),
                        ("CPU ms/req @16", cpu16),
                        ("req/s @16", rps),
                    ):
                        if v:
                            rows.setdefault((key, name), {}).setdefault(arm, []).append(float(v))
    for (key, name), arms in rows.items():
        if key[0] != "kinference" and name not in ("p50@1",):
            continue
        a, b = arms.get("base", []), arms.get("br", [])
        if not a or not b:
            continue
        p = mw_p(a, b)
        print(
            f"| {key[0]} {key[1]} | {name} | {statistics.median(a):.3f} [{min(a):.2f}–{max(a):.2f}] | {statistics.median(b):.3f} [{min(b):.2f}–{max(b):.2f}] | {len(a)}/{len(b)} | {p:.4f} |"
        )


if __name__ == "__main__":
    main()

"""Exact two-sided Mann-Whitney U by enumerating every split; medians and ranges."""

import itertools, re, statistics, sys


def u(a, b):
    return sum((x > y) + 0.5 * (x == y) for x in a for y in b)


def p_exact(a, b):
    pooled = a + b
    n = len(a)
    obs = u(a, b)
    mean = n * len(b) / 2
    extreme = total = 0
    for idx in itertools.combinations(range(len(pooled)), n):
        s = set(idx)
        x = [pooled[i] for i in idx]
        y = [pooled[i] for i in range(len(pooled)) if i not in s]
        total += 1
        extreme += abs(u(x, y) - mean) >= abs(obs - mean) - 1e-12
    return extreme / total


def summary(v):
    return f"{statistics.median(v):.1f} ({min(v):.1f}–{max(v):.1f})"


if __name__ == "__main__":
    runs = {}
    for line in open(sys.argv[1]):
        if line.startswith(("start", "end")):
            print(line.strip())
            continue
        arm, n, rest = line.split(" ", 2)
        med = float(re.search(r"median per round lowest ([\d.]+)", rest).group(1))
        mean = float(re.search(r"mean per round lowest ([\d.]+)", rest).group(1))
        runs.setdefault((n, "median"), {}).setdefault(arm, []).append(med)
        runs.setdefault((n, "mean"), {}).setdefault(arm, []).append(mean)
    for key, arms in runs.items():
        other = next(name for name in arms if name != "base")
        a, b = arms["base"], arms[other]
        print(
            key,
            "base",
            summary(a),
            other,
            summary(b),
            "n",
            len(a),
            len(b),
            "p",
            round(p_exact(a, b), 4),
        )

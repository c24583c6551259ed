"""Medians, ranges and the exact two-sided Mann-Whitney p (by enumeration, ties as 0.5) of
the A/B outputs of docs/h159/ab_age.sh (`<arm> {json}` lines): python docs/h159/mw.py OUT."""

import itertools
import json
import statistics
import sys


def mw_p(a: list[float], b: list[float]) -> float:
    def u(x: list[float], y: list[float]) -> float:
        return sum(1.0 if xi > yi else 0.5 if xi == yi else 0.0 for xi in x for yi in y)

    pooled, mean = a + b, len(a) * len(b) / 2
    observed = abs(u(a, b) - mean)
    count = total = 0
    for chosen in itertools.combinations(range(len(pooled)), len(a)):
        x = [pooled[i] for i in chosen]
        y = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        total += 1
        count += abs(u(x, y) - mean) >= observed - 1e-9
    return count / total


if __name__ == "__main__":
    runs: dict[str, list[dict[str, float]]] = {"base": [], "br": []}
    for line in open(sys.argv[1]):
        arm, _, rest = line.partition(" ")
        if arm in runs and rest.startswith("{"):
            runs[arm].append(json.loads(rest))
    for key in runs["base"][0]:
        a, b = [r[key] for r in runs["base"]], [r[key] for r in runs["br"]]
        show = lambda v: f"{statistics.median(v):.1f} [{min(v):.1f}–{max(v):.1f}]"  # noqa: E731
        print(f"| {key} | {show(a)} | {show(b)} | {mw_p(a, b):.3f} |")

"""Median [range] a side and the exact two-sided Mann-Whitney p (every split of the pooled
values enumerated): mw.py "a1 a2 ..." "b1 b2 ..."."""

from __future__ import annotations

import itertools
import statistics
import sys


def u_stat(a: list[float], b: list[float]) -> float:
    return sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b)


def exact_p(a: list[float], b: list[float]) -> float:
    pooled, n = a + b, len(a)
    centre = n * len(b) / 2
    seen = abs(u_stat(a, b) - centre)
    hits = total = 0
    for chosen in itertools.combinations(range(len(pooled)), n):
        left = [pooled[i] for i in chosen]
        right = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        total += 1
        hits += abs(u_stat(left, right) - centre) >= seen - 1e-9
    return hits / total


def main() -> None:
    a, b = ([float(x) for x in side.split()] for side in sys.argv[1:3])
    for name, xs in (("A", a), ("B", b)):
        print(
            f"{name}: median {statistics.median(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}] n={len(xs)}"
        )
    print(f"exact two-sided Mann-Whitney p = {exact_p(a, b):.3f}")


main()

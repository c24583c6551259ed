"""h165: medians, ranges and exact two-sided Mann-Whitney p over ab.sh's run files.

python docs/h165/summarize.py DIR [DIR ...]
"""

import re
import statistics
import sys
from pathlib import Path

LINE = re.compile(  # h166 added p90 and max; p99 is by nearest rank (under 100 Picks: the max)
    r"^(\d+) KiB (\S+) x(\d+) precise: p50 ([\d.]+) ms (?:p90 [\d.]+ ms )?p99 ([\d.]+) ms "
    r"(?:max [\d.]+ ms )?lag ([\d.]+) ms \((\d+) over"
)


def mw_p(a: list[float], b: list[float]) -> float:
    """Exact two-sided p: every split of the pooled values, counted by a DP over doubled
    midranks (ties kept), |rank sum - its mean| at least the observed one."""
    pooled = sorted(a + b)
    rank2 = {}
    for v in set(pooled):
        first = pooled.index(v)
        last = len(pooled) - 1 - pooled[::-1].index(v)
        rank2[v] = first + last + 2  # twice the midrank (1-based)
    ranks = [rank2[v] for v in a + b]
    k = len(a)
    counts: list[dict[int, int]] = [dict() for _ in range(k + 1)]
    counts[0][0] = 1
    for r in ranks:
        for j in range(k, 0, -1):
            for s, c in counts[j - 1].items():
                counts[j][s + r] = counts[j].get(s + r, 0) + c
    mean2 = k * (len(pooled) + 1)  # twice the mean rank sum, doubled ranks: k*(N+1)
    seen = abs(sum(rank2[v] for v in a) - mean2)
    total = sum(counts[k].values())
    hits = sum(c for s, c in counts[k].items() if abs(s - mean2) >= seen)
    return hits / total


def main() -> None:
    runs: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    for d in sys.argv[1:]:
        for f in sorted(Path(d).glob("*.txt"), key=lambda p: int(p.name.split("-")[0])):
            side = f.stem.split("-")[1]
            for line in f.read_text().splitlines():
                m = LINE.match(line)
                if not m:
                    continue
                row = f"{m[1]} KiB {m[2]} x{m[3]}"
                for name, val in (("p50", m[4]), ("p99", m[5]), ("lag", m[6]), ("stalls", m[7])):
                    runs.setdefault((row, name, side), {}).setdefault("v", []).append(float(val))
    print("| row | figure | base median [range] | new median [range] | n | p |")
    print("|---|---|---|---|---|--:|")
    keys = sorted(
        {(r, n) for r, n, _ in runs},
        key=lambda k: (k[0], ["p50", "p99", "lag", "stalls"].index(k[1])),
    )
    for row, name in keys:
        a = runs[(row, name, "base")]["v"]
        b = runs[(row, name, "new")]["v"]

        def fmt(xs: list[float]) -> str:
            return f"{statistics.median(xs):g} [{min(xs):g}-{max(xs):g}]"

        print(f"| {row} | {name} | {fmt(a)} | {fmt(b)} | {len(a)}/{len(b)} | {mw_p(a, b):.3f} |")
        print(f"<!-- {row} {name} base {a} new {b} -->")


if __name__ == "__main__":
    main()

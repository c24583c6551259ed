"""Per request across the routing benchmark's runs (docs/h153/rb.sh's --requests lines):
for each (seed, conversation, turn), the median TTFT of each side's runs, compared where
every run got the same cached tokens; medians of the differences and an exact sign test,
by kind (chat follow-ups: kind chat, turn > 0).

    python docs/h153/pairs.py OUTDIR
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def sign_p(higher: int, n: int) -> float:
    low = min(higher, n - higher)
    return min(1.0, 2 * sum(math.comb(n, k) for k in range(low + 1)) / 2**n)


def main(out: Path) -> None:
    seen: dict[tuple[int, int, int], dict[str, list[tuple[float, int]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    kinds: dict[tuple[int, int, int], str] = {}
    for path in out.glob("*.jsonl"):
        side = path.stem.split("-", 1)[1]
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if r["error"] or r["ttft_s"] is None:
                continue
            key = (r["seed"], r["conversation"], r["turn"])
            kind = (
                r["kind"] if r["kind"] != "chat" else ("chat-next" if r["turn"] else "chat-first")
            )
            kinds[key] = kind
            seen[key][side].append((r["ttft_s"] * 1e3, r["cached_tokens"]))
    groups: dict[str, list[float]] = defaultdict(list)
    for key, sides in seen.items():
        if len(sides) != 2 or min(len(v) for v in sides.values()) < 2:
            continue
        if len({c for v in sides.values() for _, c in v}) != 1:
            continue  # placements differed
        a, b = (statistics.median(t for t, _ in sides[s]) for s in sorted(sides))
        groups[kinds[key]].append(b - a)
        groups["all"].append(b - a)
    names = sorted({s for v in seen.values() for s in v})
    print(f"TTFT {names[1]} minus {names[0]}, per request (medians over runs), same cached tokens:")
    for kind, deltas in sorted(groups.items()):
        higher = sum(d > 0 for d in deltas)
        print(
            f"| {kind} | {len(deltas)} | {statistics.median(deltas):+.2f} ms | {higher} higher "
            f"| p {sign_p(higher, len(deltas)):.3f} |"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""Summarise h167's collection logs (`docs/h167/hook`): per process, thread and generation,
how many collections, their spans and CPU (median, p99, max ms), those over 1 and 10 ms;
with a census, each collection over `--over` ms with what it traversed.

    python docs/h167/gc_summary.py DIR [--over 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path


def _spread(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return f"median {statistics.median(ordered):.3f} p99 {p99:.2f} max {ordered[-1]:.2f}"


def summary(path: Path, over: float) -> list[str]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line]
    groups: dict[tuple[str, int], list[dict[str, float]]] = defaultdict(list)
    for line in lines:
        groups[line["thread"], line["gen"]].append(line)
    out = [f"{path.name}: {len(lines)} collections"]
    for (thread, gen), found in sorted(groups.items()):
        spans = [line["ms"] for line in found]
        out.append(
            f"  {thread} gen {gen}: n {len(found)}, ms {_spread(spans)}, cpu ms"
            f" {_spread([line['cpu_ms'] for line in found])}, total {sum(spans):.1f} ms,"
            f" over 1 ms {sum(s > 1 for s in spans)}, over 10 ms {sum(s > 10 for s in spans)}"
        )
    for line in lines:
        if "objects" in line and (line["ms"] > over or line["gen"] == 2):
            out.append(
                f"    gen {line['gen']} {line['ms']:.2f} ms (cpu {line['cpu_ms']:.2f}):"
                f" objects {line['objects']} items {line['items']} {line['top']}\n"
                f"      largest {line['largest']}"
            )
    return out


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("dir", type=Path)
    cli.add_argument("--over", type=float, default=1.0, help="collections listed (ms)")
    args = cli.parse_args()
    for path in sorted(args.dir.glob("gc.*.jsonl")):
        print("\n".join(summary(path, args.over)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

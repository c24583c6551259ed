"""Summarize `docs/h174/tracer.py`'s JSON lines, one picker process's file per argument.

    python docs/h174/summarize.py /tmp/h174/tr-NAME.*

Per file: server-side Pick p50 / p90 / p99 (ms); the loop thread's CPU from the first Pick to
the last, its share of that wall time and per Pick; the precise prepares (run on the loop
or on the thread, their time, characters tokenized on their path, background slices, slices
queued at their start, marks dropped); then per turn of the bench's chats (by text length:
a turn adds ~661 characters): Picks, how far before the text's end they resumed (p50, max),
characters tokenized on the path and run time (p50).
"""

from __future__ import annotations

import json
import sys
from typing import Any

TURN_CHARS = 661  # what a turn of `bench_precise_pick`'s chats adds to the rendered text


def q(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[int(share * (len(ordered) - 1))] if ordered else float("nan")


def summary(records: list[dict[str, Any]]) -> list[str]:
    picks = [r for r in records if "pick_ms" in r]
    prepares = [r for r in records if "ms" in r]
    slices = [r for r in records if "bg" in r]
    if not picks:
        return []
    wall, cpu = picks[-1]["t"] - picks[0]["t"], picks[-1]["cpu"] - picks[0]["cpu"]
    times = [r["pick_ms"] for r in picks]
    lines = [
        f"{len(picks)} Picks; server Pick ms p50 {q(times, 0.5):.2f} p90 {q(times, 0.9):.2f}"
        f" p99 {q(times, 0.99):.2f}; loop CPU {cpu:.2f} s over {wall:.2f} s"
        f" ({100 * cpu / max(wall, 1e-9):.0f} %), {1000 * cpu / len(picks):.2f} ms per Pick"
    ]
    if not prepares:
        return lines
    inline = [r for r in prepares if r["inline"]]
    lines.append(
        f"prepares {len(prepares)} ({len(inline)} on the loop, their work"
        f" {sum(r['run_ms'] for r in inline) / 1000:.2f} s); prepare ms p50"
        f" {q([r['ms'] for r in prepares], 0.5):.2f}, work p50"
        f" {q([r['run_ms'] for r in prepares], 0.5):.2f}; chars tokenized on the path"
        f" {sum(r['encoded'] for r in prepares)}, in {len(slices)} background slices"
        f" {sum(r['encoded'] for r in slices)} ({sum(r['bg'] for r in slices):.0f} ms);"
        f" slices queued at a prepare p50 {q([r['later'] for r in prepares], 0.5):.0f} max"
        f" {max(r['later'] for r in prepares)}; marks dropped"
        f" {sum(1 for r in records if 'drop' in r)}"
    )
    base = min(r["chars"] for r in prepares if r["chars"])
    turns: dict[int, list[dict[str, Any]]] = {}
    for r in prepares:
        turns.setdefault(min(5, (r["chars"] - base + 300) // TURN_CHARS), []).append(r)
    for turn, rows in sorted(turns.items()):
        back = [r["chars"] - r["resumed"] for r in rows if r["resumed"] > 0]
        lines.append(
            f"  turn {turn}: {len(rows)}, not resumed {len(rows) - len(back)}, resumed chars"
            f" before the end p50 {q(back, 0.5):.0f} max {max(back, default=0)}, tokenized"
            f" on the path p50 {q([r['encoded'] for r in rows], 0.5):.0f}, work ms p50"
            f" {q([r['run_ms'] for r in rows], 0.5):.2f}"
        )
    return lines


def main() -> None:
    for path in sys.argv[1:]:
        with open(path) as lines:
            records = [json.loads(line) for line in lines]
        print(path, *summary(records), sep="\n  ")


if __name__ == "__main__":
    main()

"""Summarize h176 traces: python docs/h176/summarize.py FILE... (one file per picker).

Per file: each wave's first turns in order of their start (ms after the wave's first):
on the loop (`here_ms`), waiting for the thread, on it, where it resumed and stopped,
characters walked / tokenized, and the background slices meanwhile; then per-class medians."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summarize(path: Path, timeline: bool) -> None:
    records = load(path)
    preps = sorted((r for r in records if "p" in r), key=lambda r: r["t0"])
    if not preps:
        return
    slices = [r for r in records if "b" in r]
    least = min(r["chars"] for r in preps if r["chars"])
    first = [r for r in preps if 0 < r["chars"] < least + 300]
    later = [r for r in preps if r["chars"] >= least + 300]
    print(f"== {path.name}: {len(preps)} prompts, {len(first)} first turns, {len(slices)} slices")
    waves: list[list[dict]] = []
    for r in first:
        if not waves or r["t0"] - waves[-1][0]["t0"] > 0.05:
            waves.append([])
        waves[-1].append(r)
    for wave in waves if timeline else []:
        t0 = wave[0]["t0"]
        end = max(r["t0"] + r["ms"] / 1000 for r in wave)
        print(f"  wave of {len(wave)} (span {(end - t0) * 1000:.1f} ms):")
        print(
            "    start   ms  here  wait  thread  resumed   pos  walked encoded late caught blocks defer"
        )
        for r in wave:
            print(
                f"    {(r['t0'] - t0) * 1000:5.1f} {r['ms']:5.1f} {r['here_ms']:5.2f}"
                f" {r['wait_ms']:5.1f} {r['thread_ms']:6.2f} {r['resumed']:7d} {r['pos']:6d}"
                f" {r['walked']:6d} {r['encoded']:6d} {int(r['late']):4d} {r['caught']:6d}"
                f" {r.get('blocks', -1):5d} {int(r.get('deferred', False)):4d}"
            )
        bg = [s for s in slices if t0 <= s["t0"] <= end]
        print(
            f"    background slices in the wave: {len(bg)}, {sum(s['ms'] for s in bg):.1f} ms,"
            f" encoded {sum(s['encoded'] for s in bg)}"
        )
    for name, group in (("first", first), ("later", later)):
        if not group:
            continue
        med = {
            k: statistics.median(r[k] for r in group)
            for k in ("ms", "here_ms", "thread_ms", "walked", "encoded")
        }
        print(
            f"  {name}: n {len(group)} "
            + " ".join(f"{k} {v:.2f}" for k, v in med.items())
            + f" late {sum(r['late'] for r in group)}"
            f" deferred {sum(r.get('deferred', False) for r in group)} on-thread"
            f" {sum(r['wait_ms'] >= 0 for r in group)}"
        )


if __name__ == "__main__":
    args = sys.argv[1:]
    timeline = "--timeline" in args
    for name in (a for a in args if not a.startswith("--")):
        summarize(Path(name), timeline)

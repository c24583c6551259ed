"""h167: `runs.sh`'s runs summarised: per row, the plain and logged (not traced) runs'
stalls over 10 ms, worst lag and Pick p99 (medians, ranges, exact two-sided Mann-Whitney
p: h165's `mw_p`); the logged runs' collections while serving (after the startup freeze,
before exit's), per thread and generation; and each traced stall that
`loadtest.stall_trace` put on a collection, beside that collection's span and CPU in the
log (matched by generation and objects collected).

    python docs/h167/ab_summary.py OUTDIR
"""

from __future__ import annotations

import importlib.util
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROW = re.compile(
    r"^1024 KiB (\S+) x16 precise: p50 [\d.]+ ms p99 ([\d.]+) ms lag ([\d.]+) ms \((\d+) "
)
TRACED_GC = re.compile(r"\[gc\] gc: (.*?); \d+ samples")
ONE_GC = re.compile(r"gen(\d) ([\d.]+)ms/(\d+)")


def _mw_p() -> Any:
    path = Path(__file__).parents[1] / "h165" / "summarize.py"
    spec = importlib.util.spec_from_file_location("h165_summarize", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.mw_p


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):g} [{min(values):g}-{max(values):g}]"


def serving(path: Path) -> list[dict[str, Any]]:
    """A picker's collections after its startup freeze and before its exit's (which
    begins with a full collection as objects start to be freed)."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line]
    frozen = [line for line in lines if line["frozen"] > 0]
    peak = max((line["frozen"] for line in frozen), default=0)
    kept = []
    for line in frozen:
        if line["frozen"] < peak and line["gen"] == 2:  # exit's: frozen objects freed
            break
        kept.append(line)
    return kept


def figures(out: Path) -> None:
    mw_p = _mw_p()
    found: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for run in sorted(out.iterdir(), key=lambda p: int(p.name.split("-")[0])):
        side = run.name.split("-", 1)[1]
        for line in (run / "out.txt").read_text().splitlines():
            if m := ROW.match(line):
                for name, value in (("stalls", m[4]), ("lag ms", m[3]), ("p99 ms", m[2])):
                    found[m[1], name, side].append(float(value))
    print("| row | figure | plain median [range] | logged median [range] | n | p |")
    print("|---|---|---|---|---|--:|")
    for row, name in sorted({(r, n) for r, n, _ in found}):
        a, b = found[row, name, "plain"], found[row, name, "logged"]
        print(
            f"| {row} x16 | {name} | {_fmt(a)} | {_fmt(b)} | {len(a)}/{len(b)} | {mw_p(a, b):.3f} |"
        )


def collections(out: Path) -> None:
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    rows = 0
    for path in out.glob("*/gc.*.jsonl"):
        rows += 1
        for line in serving(path):
            groups[line["thread"], line["gen"]].append(line)
    print(f"\nCollections while serving, {rows} rows (pickers):")
    for (thread, gen), lines in sorted(groups.items()):
        cpu = sorted(line["cpu_ms"] for line in lines)
        wall = sorted(line["ms"] for line in lines)
        print(
            f"  {thread} gen {gen}: {len(lines) / rows:.1f} a row; CPU median {_fmt(cpu)} ms,"
            f" total {sum(cpu) / rows:.2f} ms a row; span median {_fmt(wall)} ms"
        )


def traced(out: Path) -> None:
    print("\nStalls the trace put on a collection: its span there | the log's span / CPU:")
    for run in sorted(out.glob("*-traced")):
        logged = [line for path in run.glob("gc.*.jsonl") for line in serving(path)]
        for stall in TRACED_GC.finditer((run / "out.txt").read_text()):
            late = stall.string[: stall.start()].rsplit("\n", 1)[-1].split("/")[0].strip()
            parts = []
            for gen, ms, freed in ONE_GC.findall(stall[1]):
                match = [
                    f"{line['ms']:.1f}/{line['cpu_ms']:.1f}"
                    for line in logged
                    if line["gen"] == int(gen) and line["collected"] == int(freed)
                ]
                parts.append(f"gen{gen} {ms} ms | {' or '.join(match) or '?'}")
            print(f"  {run.name}: late {late} ms: " + "; ".join(parts))


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    figures(out)
    collections(out)
    traced(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""h204: the A/B's figures (`ab.sh` output): per side median [min–max] of each figure, µs per
Pick, exact two-sided Mann-Whitney p (`docs/h188/mw.py`'s).

    python docs/h204/mw.py [DIR]
"""

import ast
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _h188_mannwhitneyu() -> Callable[[list[float], list[float]], float]:
    """docs/h188/mw.py's exact two-sided Mann-Whitney (its function alone: that file is a
    script)."""
    source = (Path(__file__).parents[1] / "h188" / "mw.py").read_text()
    tree = ast.parse(source)
    tree.body = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.Import)]
    scope: dict[str, Any] = {}
    exec(compile(tree, "docs/h188/mw.py", "exec"), scope)
    return scope["mannwhitneyu"]  # type: ignore[no-any-return]


mannwhitneyu = _h188_mannwhitneyu()
directory = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "ab")
runs = [json.loads(line) for line in (directory / "runs.jsonl").read_text().splitlines()]
figures: dict[str, dict[str, list[float]]] = {}
for run in runs:
    path = directory / f"{run['side']}-{run['run']}.json"
    if not path.exists():
        continue
    for figure, value in json.loads(path.read_text()).items():
        figures.setdefault(figure, {"a": [], "b": []})[run["side"]].append(value)
print("| figure, µs per Pick | base (a) | branch (b) | change | p |")
print("|---|---|---|--:|--:|")
for figure in sorted(figures, key=lambda f: (f.split(":")[0] != "dynamo", f)):
    a, b = figures[figure]["a"], figures[figure]["b"]
    if not a or not b:
        continue
    ma, mb = statistics.median(a), statistics.median(b)
    print(
        f"| {figure} | {ma:.0f} [{min(a):.0f}–{max(a):.0f}] (n {len(a)}) "
        f"| {mb:.0f} [{min(b):.0f}–{max(b):.0f}] (n {len(b)}) | {100 * (mb / ma - 1):+.1f} % "
        f"| {mannwhitneyu(a, b):.4f} |"
    )

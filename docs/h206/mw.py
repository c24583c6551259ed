"""h206: the A/B's figures from `ab.sh` output — per side median [min-max] of the gateway's
CPU ms per request (the deciding figure), its reads per request, TTFT p50/p90 and added
p50/p90, with the exact two-sided Mann-Whitney p (h188's enumeration).

    python docs/h206/mw.py docs/h206/ab1.jsonl
"""

import ast
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

COLUMNS = {"TTFT p50": 2, "TTFT p90": 3, "added p50": 5, "added p90": 6, "CPU ms/req": 10,
           "reads/req": 11}  # fmt: skip


def _h188_mannwhitneyu() -> Callable[[list[float], list[float]], float]:
    """h188's exact two-sided Mann-Whitney (`docs/h188/mw.py`), its function alone (that
    script runs on import)."""
    source = Path(__file__).parents[1] / "h188" / "mw.py"
    tree = ast.parse(source.read_text())
    node = next(n for n in tree.body if getattr(n, "name", "") == "mannwhitneyu")
    namespace: dict[str, Any] = {}
    exec(compile(ast.Module([node], []), str(source), "exec"), namespace)
    return namespace["mannwhitneyu"]  # type: ignore[no-any-return]


mannwhitneyu = _h188_mannwhitneyu()


def main() -> None:
    with open(sys.argv[1]) as lines:
        rows = [json.loads(line) for line in lines]
    for row in rows:
        row["cells"] = [c.strip() for c in row["row"].split("|")[1:-1]]
    for name, at in COLUMNS.items():
        a = [float(r["cells"][at]) for r in rows if r["side"] == "base"]
        b = [float(r["cells"][at]) for r in rows if r["side"] == "br"]
        p = mannwhitneyu(a, b)
        print(
            f"{name}: base {statistics.median(a):.2f} [{min(a):.2f}-{max(a):.2f}] (n {len(a)}), "
            f"branch {statistics.median(b):.2f} [{min(b):.2f}-{max(b):.2f}] (n {len(b)}), p {p:.3f}"
        )


main()

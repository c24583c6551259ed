"""docs/metrics.md lists exactly the metrics a live picker exports, with their types and
labels."""

from __future__ import annotations

import re
from pathlib import Path

from tests.ops.helpers import Exposition

DOC = Path(__file__).parents[2] / "docs" / "metrics.md"
_ROW = re.compile(r"^\| `(kinference_[a-z0-9_]+)` \| (\w+) \|([^|]*)\|", re.MULTILINE)


def documented() -> dict[str, tuple[str, set[str]]]:
    """Metric name -> (type, labels) from the tables of docs/metrics.md."""
    rows = {}
    for name, kind, labels in _ROW.findall(DOC.read_text()):
        assert name not in rows, f"{name} is listed twice"
        rows[name] = (kind, set(re.findall(r"`(\w+)`", labels)))
    return rows


def test_the_doc_lists_every_exported_metric_and_nothing_else(exposition: Exposition) -> None:
    listed = documented()
    assert sorted(set(exposition.families) - set(listed)) == [], "exported, not documented"
    assert sorted(set(listed) - set(exposition.families)) == [], "documented, not exported"
    for name, (kind, labels) in listed.items():
        assert exposition.families[name] == kind, name
        assert exposition.family_labels[name] == labels, name


def test_the_doc_table_parser_reads_rows() -> None:
    listed = documented()
    assert listed["kinference_pick_reasons_total"] == ("counter", {"outcome", "reason"})
    assert listed["kinference_buffered_bytes"] == ("gauge", set())
    assert len(listed) >= 30

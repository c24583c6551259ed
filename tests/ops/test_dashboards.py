"""The Grafana dashboard and the alert rules query only series a live picker exports."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.ops.helpers import Exposition

ROOT = Path(__file__).parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "kinference.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
TARGET_LABELS = {"namespace", "pod"}  # added by the Prometheus scrape, not by kinference

_METRIC = re.compile(r"\bkinference_[a-z0-9_]+")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_MATCHERS = re.compile(r"\{([^}]*)\}")
_MATCHER = re.compile(r"(\w+)\s*(?:=~|!~|!=|=)")


def metrics_in(expr: str) -> set[str]:
    return set(_METRIC.findall(expr))


def labels_in(expr: str) -> set[str]:
    labels = set()
    for group in _GROUPING.findall(expr):
        labels.update(name.strip() for name in group.split(",") if name.strip())
    for matchers in _MATCHERS.findall(expr):
        labels.update(_MATCHER.findall(matchers))
    return labels


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def dashboard_exprs(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in panels(dashboard) for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            exprs.append(variable["query"]["query"])
    return exprs


def alert_exprs() -> list[str]:
    rules = yaml.safe_load(ALERTS.read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def check_queries(exprs: list[str], exposition: Exposition) -> None:
    known_labels = exposition.labels | TARGET_LABELS | {"le"}
    for expr in exprs:
        unknown = metrics_in(expr) - exposition.samples
        assert not unknown, f"{expr}: no such series {sorted(unknown)}"
        assert metrics_in(expr), f"{expr}: queries no kinference metric"
        assert labels_in(expr) <= known_labels, f"{expr}: {labels_in(expr) - known_labels}"


def test_dashboard_queries_exported_series(exposition: Exposition) -> None:
    check_queries(dashboard_exprs(json.loads(DASHBOARD.read_text())), exposition)


def test_alert_rules_query_exported_series(exposition: Exposition) -> None:
    exprs = alert_exprs()
    assert len(exprs) >= 5
    check_queries(exprs, exposition)


def test_dashboard_is_an_importable_model() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert {"namespace", "pod"} <= set(variables)
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        for target in panel["targets"]:
            # Every query follows the namespace and pod pickers.
            assert 'namespace=~"$namespace"' in target["expr"], panel["title"]
            assert 'pod=~"$pod"' in target["expr"], panel["title"]


def test_heatmaps_read_histogram_buckets() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    heatmaps = [p for p in panels(dashboard) if p["type"] == "heatmap"]
    queried = set()
    for panel in heatmaps:
        (target,) = panel["targets"]
        assert target["format"] == "heatmap"
        assert "sum by (le)" in target["expr"]
        queried |= metrics_in(target["expr"])
    assert queried == {"kinference_ttft_seconds_bucket", "kinference_itl_seconds_bucket"}


def test_query_parsing() -> None:
    expr = 'sum by (le, pod) (rate(kinference_x_bucket{reason!="none", pod=~"$pod"}[5m]))'
    assert metrics_in(expr) == {"kinference_x_bucket"}
    assert labels_in(expr) == {"le", "pod", "reason"}
    assert labels_in("a / ignoring(source) group_left b") == {"source"}

"""`kinference state` output: aligned text tables for people, or one JSON object."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from kinference.ops.state import ClusterState

_GAP = "  "  # between columns
_NONE = "-"  # a value nobody knows (no engine reading, a replica gone)


def render_json(state: ClusterState) -> str:
    return json.dumps(dataclasses.asdict(state), indent=2)


def render_text(state: ClusterState) -> str:
    """Every section, each a title and a table (or a line saying it is empty)."""
    live = sum(1 for replica in state.replicas if replica.alive)
    sections = [
        (f"REPLICAS ({live} live)", _replicas(state), "no replica has announced itself"),
        ("WORKERS", _workers(state), "no worker carries load or has an engine reading"),
        ("SCRAPE LEADERS", _leaders(state), "no pool has a scrape leader"),
        ("BLACKLISTED PROVIDERS", _blacklist(state), "no provider is blacklisted"),
        ("TENANT USAGE (tokens)", _tenants(state), "no tenant usage recorded"),
    ]
    blocks = []
    for title, rows, empty in sections:
        body = table(rows) if len(rows) > 1 else [f"  {empty}"]
        blocks.append("\n".join([title, *body]))
    return "\n\n".join(blocks)


def table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows (the first is the header) as left-aligned columns; the last is not padded."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        lines.append(("  " + _GAP.join(cells)).rstrip())
    return lines


def _replicas(state: ClusterState) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = [("INSTANCE", "HEARTBEAT", "IN FLIGHT")]
    for replica in state.replicas:
        beat = _ago(replica.heartbeat_age_s) if replica.alive else "gone"
        rows.append((replica.instance, beat, str(replica.inflight) if replica.alive else _NONE))
    return rows


def _workers(state: ClusterState) -> list[tuple[str, ...]]:
    header = ("ENDPOINT", "IN FLIGHT", "READY", "WAITING", "RUNNING", "KV USE", "READ")
    rows: list[tuple[str, ...]] = [(*header, "SCRAPED BY")]
    for worker in state.workers:
        ready = _NONE if worker.ready is None else ("yes" if worker.ready else "no")
        kv = _NONE if worker.kv_usage is None else f"{worker.kv_usage:.0%}"
        rows.append((worker.endpoint, str(worker.inflight), ready, _count(worker.waiting),
                     _count(worker.running), kv, _ago(worker.reading_age_s),
                     worker.scraped_by or _NONE))  # fmt: skip
    return rows


def _leaders(state: ClusterState) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = [("POOL", "LEADER", "LEASE LEFT")]
    rows += [(lead.pool, lead.instance, ttl_text(lead.ttl_ms)) for lead in state.leaders]
    return rows


def _blacklist(state: ClusterState) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = [("PROVIDER", "REASON", "COUNT", "LEFT", "LAST SEEN", "DETAIL")]
    for entry in state.blacklist:
        rows.append((entry.provider, entry.reason, str(entry.count), ttl_text(entry.ttl_ms),
                     entry.last_seen, entry.detail[:60]))  # fmt: skip
    return rows


def _tenants(state: ClusterState) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = [("TENANT", "THIS MINUTE", "LAST MINUTE", "LEASED (60 s)")]
    for usage in state.tenants:
        rows.append((usage.tenant, str(usage.this_minute), str(usage.last_minute),
                     str(usage.leased)))  # fmt: skip
    return rows


def _count(value: float | None) -> str:
    return _NONE if value is None else f"{value:g}"


def _ago(seconds: float | None) -> str:
    return _NONE if seconds is None else f"{seconds:.1f}s ago"


def ttl_text(ttl_ms: int) -> str:
    """Time left of a key: `12.5s`, `4m59s`, `1h02m`; `forever` without a TTL (set by
    hand). Also `kinference blacklist list`'s."""
    if ttl_ms < 0:
        return "forever"
    seconds = ttl_ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, whole = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{whole:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"

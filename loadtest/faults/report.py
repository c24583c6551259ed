"""What each scenario measured, the targets it is held to, and the printed table.

Targets: no failed request besides the spec's own errors; after the TTLs every replica
holds no body bytes, no body and no request in flight, and its RSS is back within
`RSS_SLACK_MIB` (or `RSS_SLACK_FRACTION` of it, if larger) of the baseline taken after a
warm-up; where state was disturbed, every replica's view equals a freshly started one's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from loadtest.faults.harness import Replica, ScenarioFailed, wait_for
from loadtest.faults.load import Tally

# MiB over the warm baseline that a replica's RSS may keep after a fault: the allocator
# keeps some freed arenas, and grpc keeps per-connection buffers it grew.
RSS_SLACK_MIB = 48.0
RSS_SLACK_FRACTION = 0.5
RSS_SETTLE_S = 10.0  # seconds allowed for RSS to come back once the bodies are gone


@dataclass
class Row:
    """One scenario's figures; `problems` lists every target missed (empty: all met)."""

    scenario: str
    tally: Tally = field(default_factory=Tally)
    buffered_after: int = -1  # bytes, the largest over the replicas
    bodies_after: int = -1
    inflight_after: int = -1
    rss_baseline_mib: float = 0.0  # the largest replica's
    rss_after_mib: float = 0.0
    state_equal: bool | None = None  # None: the scenario disturbs no shared state
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems and self.tally.failed == 0


def rss_bound_mib(baseline_mib: float) -> float:
    return baseline_mib + max(RSS_SLACK_MIB, RSS_SLACK_FRACTION * baseline_mib)


async def _nothing_held(replica: Replica) -> bool:
    scrape = await replica.scrape()
    return (
        scrape.value("kinference_buffered_bytes") == 0
        and scrape.value("kinference_bodies_held") == 0
        and not scrape.inflight()
    )


async def settle_memory(
    row: Row, replicas: Sequence[Replica], baselines: Sequence[float], within_s: float
) -> None:
    """Wait (up to `within_s`) for every replica to hold nothing, then for RSS to settle;
    records the readings in `row`, and a problem for each target missed."""
    try:
        for replica in replicas:
            await wait_for(lambda r=replica: _nothing_held(r), within_s, f"{replica.name} empty")
    except ScenarioFailed as exc:
        row.problems.append(str(exc))
    scrapes = [await replica.scrape() for replica in replicas]
    row.buffered_after = int(max(s.value("kinference_buffered_bytes") for s in scrapes))
    row.bodies_after = int(max(s.value("kinference_bodies_held") for s in scrapes))
    row.inflight_after = max(sum(s.inflight().values()) for s in scrapes)
    deadline = time.monotonic() + RSS_SETTLE_S
    for replica, baseline in zip(replicas, baselines, strict=True):
        while replica.rss_mib() > rss_bound_mib(baseline) and time.monotonic() < deadline:
            await _rss_poll()
    row.rss_baseline_mib = max(baselines)
    row.rss_after_mib = max(replica.rss_mib() for replica in replicas)
    for replica, baseline in zip(replicas, baselines, strict=True):
        if (rss := replica.rss_mib()) > rss_bound_mib(baseline):
            row.problems.append(f"{replica.name} RSS {rss:.0f} MiB over {baseline:.0f} MiB + slack")


async def _rss_poll() -> None:
    await asyncio.sleep(0.2)  # polling RSS against a deadline


async def views_equal(row: Row, replicas: Sequence[Replica], fresh: Replica) -> None:
    """Compare every replica's in-flight load per worker with a freshly started replica's;
    waits (bounded) for them to agree, since the survivors' views converge, not jump."""
    views: list[dict[str, int]] = []

    async def agree() -> bool:
        nonlocal views
        views = [(await r.scrape()).inflight() for r in (*replicas, fresh)]
        return all(view == views[-1] for view in views)

    try:
        await wait_for(agree, 10.0, "every replica's view equal to a fresh replica's")
        row.state_equal = True
    except ScenarioFailed:
        row.state_equal = False
        row.problems.append(f"views differ: {views}")
    row.notes.append(f"view {views[-1] if views else {}}")


_COLUMNS = (
    ("scenario", 14),
    ("requests", 9),
    ("failed", 7),
    ("spec errors", 28),
    ("buffered after", 15),
    ("RSS base/after MiB", 19),
    ("state equal", 12),
    ("s", 5),
    ("ok", 4),
)


def format_table(rows: Sequence[Row]) -> str:
    lines = [" ".join(name.ljust(width) for name, width in _COLUMNS)]
    for row in rows:
        errors = ", ".join(f"{code} {n}" for code, n in sorted(row.tally.spec_errors.items()))
        state = "n/a" if row.state_equal is None else ("yes" if row.state_equal else "NO")
        cells = (
            row.scenario,
            str(row.tally.requests),
            str(row.tally.failed),
            errors or "-",
            f"{row.buffered_after} B/{row.bodies_after}/{row.inflight_after}",
            f"{row.rss_baseline_mib:.0f}/{row.rss_after_mib:.0f}",
            state,
            f"{row.seconds:.0f}",
            "yes" if row.ok else "NO",
        )
        lines.append(" ".join(c.ljust(w) for c, (_, w) in zip(cells, _COLUMNS, strict=True)))
    for row in rows:
        for note in row.notes:
            lines.append(f"  {row.scenario}: {note}")
        for text in [*row.problems, *row.tally.examples]:
            lines.append(f"  {row.scenario} PROBLEM: {text}")
    return "\n".join(lines)

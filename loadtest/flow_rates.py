"""Scenario (a) of the picker benchmark: completed flows per second against the baseline,
the spec's five calls each, and kinference's two-call flow with its extensions (info).

Both servers are driven alike, rounds alternated (`Pair.abba`); the rate follows the
server's CPU per flow closely on a small host, so that is reported beside it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from loadtest.flows import chat_body, flow_rate
from loadtest.scenarios import ROLES, Pair, Row, Settings, log, verdict


@dataclass
class _RateTotals:
    flows: int = 0
    seconds: float = 0.0
    all_flows: int = 0
    cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    wall_s: float = 0.0

    @property
    def rate(self) -> float:
        return self.flows / self.seconds

    @property
    def cpu_ms_per_flow(self) -> float:
        return 1000 * self.cpu_s / self.all_flows

    @property
    def server_busy(self) -> float:
        return self.cpu_s / self.wall_s

    @property
    def client_busy(self) -> float:
        return self.client_cpu_s / self.wall_s


async def _rates(pair: Pair, settings: Settings, two_calls: bool) -> dict[str, _RateTotals]:
    """Flow rates of both sides, alternated; kinference's flow in two calls if asked
    (the baseline's always the spec's five: it has no extensions)."""
    body = chat_body(settings.small_body_bytes)
    totals = {role: _RateTotals() for role in ROLES}
    round_s = settings.measure_s / settings.rounds
    short_role = "kinference" if two_calls else None  # the baseline has no extensions
    for role, side in (("baseline", pair.baseline), ("kinference", pair.kinference)):
        await flow_rate(
            side.client, body, settings.workers, settings.warmup_s, 0.0,
            two_calls=role == short_role,
        )  # fmt: skip
    for role, side in pair.abba(settings.rounds):
        short = role == short_role
        cpu_start, client_start = side.server.cpu_seconds(), time.process_time()
        wall_start = time.perf_counter()
        window = await flow_rate(
            side.client, body, settings.workers, settings.ramp_s, round_s, two_calls=short
        )
        total = totals[role]
        total.wall_s += time.perf_counter() - wall_start
        total.client_cpu_s += time.process_time() - client_start
        total.cpu_s += side.server.cpu_seconds() - cpu_start
        total.all_flows += window.total_flows
        total.flows += window.flows
        total.seconds += window.seconds
        log(f"  flow rate {role:>10}{' (2 calls)' if short else ''}: {window.rate:8.0f} flows/s")
    return totals


async def two_call_rows(pair: Pair, settings: Settings) -> list[Row]:
    """(a) info: kinference's flow in two calls (pick on push, body inline, the first
    report in the final one: what `kinference gateway --picker` and callers using the
    extensions pay) against the baseline's five."""
    totals = await _rates(pair, settings, two_calls=True)
    base, kinf = totals["baseline"], totals["kinference"]
    ratio = kinf.rate / base.rate
    return [
        Row(
            "(a) two-call flow (pick on push, body inline, first report folded) against the "
            "baseline's five calls (flows/s)",
            f"{base.rate:.0f}",
            f"{kinf.rate:.0f}",
            f"{ratio:.2f}",
            "",
            "info",
        ),
        _cpu_row("(a) two-call flow: server CPU per flow (ms)", base, kinf),
    ]


async def flow_rate_rows(pair: Pair, settings: Settings) -> list[Row]:
    """(a) Completed full flows per second, 64 workers on one channel per server."""
    totals = await _rates(pair, settings, two_calls=False)
    base, kinf = totals["baseline"], totals["kinference"]
    ratio = kinf.rate / base.rate
    return [
        Row(
            f"(a) full flow rate, {settings.workers} workers, "
            f"{settings.small_body_bytes // 1024} KiB body, "
            f"{settings.rounds}x{settings.measure_s / settings.rounds:.1f}s alternated (flows/s)",
            f"{base.rate:.0f}",
            f"{kinf.rate:.0f}",
            f"{ratio:.2f}",
            "≥ 0.75",
            verdict(ratio >= 0.75),
        ),
        _cpu_row("(a) server CPU per flow (ms)", base, kinf),
        Row(
            "(a) CPU busy, server / bench client (cores)",
            f"{base.server_busy:.2f} / {base.client_busy:.2f}",
            f"{kinf.server_busy:.2f} / {kinf.client_busy:.2f}",
            "",
            "",
            "info",
        ),
    ]


def _cpu_row(scenario: str, base: _RateTotals, kinf: _RateTotals) -> Row:
    return Row(
        scenario,
        f"{base.cpu_ms_per_flow:.3f}",
        f"{kinf.cpu_ms_per_flow:.3f}",
        f"{kinf.cpu_ms_per_flow / base.cpu_ms_per_flow:.2f}",
        "",
        "info",
    )

"""The picker benchmark's scenarios (b) and (c) and what every scenario shares (settings,
rows, the pair of servers); (a), the flow rates, is `loadtest.flow_rates`.

Every scenario returns table rows; a ratio is always kinference against baseline, with
runs alternated (ABBA) so slow drift on a noisy machine hits both sides alike.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import grpc

from kinference.v1 import picker_pb2_grpc
from loadtest.flows import Body, FlowClient, body_round_trip, open_channel
from loadtest.servers import ServerProcess, ServerSpec, running

MIB = 1 << 20


@dataclass(frozen=True)
class Settings:
    label: str  # "quick" or "full", shown in the table title
    workers: int
    small_body_bytes: int
    warmup_s: float  # once per server, before the first (a) round
    ramp_s: float  # at the start of every (a) round, not counted
    measure_s: float  # measured seconds per server in (a), split into short rounds
    round_s: float  # one measured (a) round; short rounds alternate finely
    big_body_bytes: int
    big_reps: int  # per server, after one untimed warm-up each

    @property
    def rounds(self) -> int:
        return max(2, round(self.measure_s / self.round_s))

    @property
    def big_label(self) -> str:
        return f"{self.big_body_bytes // MIB} MiB"


@dataclass(frozen=True)
class Row:
    scenario: str
    baseline: str
    kinference: str
    ratio: str
    target: str
    verdict: str  # PASS, FAIL or "info"


@dataclass(frozen=True)
class Side:
    server: ServerProcess
    client: FlowClient


ROLES = ("baseline", "kinference")


@dataclass(frozen=True)
class Pair:
    baseline: Side
    kinference: Side

    def abba(self, rounds: int) -> list[tuple[str, Side]]:
        """B K K B B K ... : each side ``rounds`` times, balanced in position."""
        sides = [("baseline", self.baseline), ("kinference", self.kinference)]
        order: list[tuple[str, Side]] = []
        for i in range(rounds):
            order += sides if i % 2 == 0 else sides[::-1]
        return order


def side_for(server: ServerProcess, channel: grpc.aio.Channel) -> Side:
    return Side(server, FlowClient(picker_pb2_grpc.PickerStub(channel)))


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def big_body_rows(pair: Pair, settings: Settings, body: Body) -> list[Row]:
    """(b) Push + Pick + Pull of one big body, end to end; medians over alternated reps."""
    totals: dict[str, list[float]] = {role: [] for role in ROLES}
    picks: dict[str, list[float]] = {role: [] for role in ROLES}
    faults: dict[str, list[int]] = {role: [] for role in ROLES}
    for side in (pair.baseline, pair.kinference):
        await body_round_trip(side.client, body)  # warm-up: channel windows, allocator
    for role, side in pair.abba(settings.big_reps):
        faults_before = side.server.minor_faults()
        trip = await body_round_trip(side.client, body)
        faults[role].append(side.server.minor_faults() - faults_before)
        totals[role].append(1000 * trip.total_s)
        picks[role].append(1000 * trip.pick_s)
        log(
            f"  {settings.big_label} round trip {role:>10}: "
            f"{1000 * trip.total_s:7.1f} ms (pick {1000 * trip.pick_s:6.2f} ms)"
        )
    base_ms, kinf_ms = (statistics.median(totals[role]) for role in ROLES)
    base_pick, kinf_pick = (statistics.median(picks[role]) for role in ROLES)
    ratio = base_ms / kinf_ms
    # Each alternation round ran one rep of each side back to back: pairing them cancels
    # load that drifts over the run (other processes on a shared machine).
    paired = statistics.median(
        base / kinf for base, kinf in zip(totals["baseline"], totals["kinference"], strict=True)
    )
    return [
        Row(
            f"(b) {settings.big_label} body push+pick+pull, median of {settings.big_reps} (ms)",
            f"{base_ms:.1f}",
            f"{kinf_ms:.1f}",
            f"{ratio:.2f}",
            "≥ 0.80 (base/kinf)",
            verdict(ratio >= 0.8),
        ),
        Row(
            f"(b) same, best of {settings.big_reps} (ms)",
            f"{min(totals['baseline']):.1f}",
            f"{min(totals['kinference']):.1f}",
            f"{min(totals['baseline']) / min(totals['kinference']):.2f}",
            "",
            "info",
        ),
        Row(
            f"(b) same, median of {settings.big_reps} back-to-back pair ratios",
            "",
            "",
            f"{paired:.2f}",
            "",
            "info",
        ),
        Row(
            # Each 4 KiB page a server's allocator maps in afresh (kinference's fixed mmap
            # threshold: every chunk-sized block) is one fault; ~1 µs each (docs/benchmarks.md).
            "(b) server minor page faults per round trip, median",
            f"{statistics.median(faults['baseline']):.0f}",
            f"{statistics.median(faults['kinference']):.0f}",
            "",
            "",
            "info",
        ),
        Row(
            f"(b) Pick latency alone on the {settings.big_label} body (ms)",
            f"{base_pick:.2f}",
            f"{kinf_pick:.2f}",
            "",
            "",
            "info",
        ),
    ]


@dataclass(frozen=True)
class Memory:
    idle_mib: float
    peak_mib: float

    @property
    def growth_mib(self) -> float:
        return self.peak_mib - self.idle_mib


async def _peak_while_holding(spec: ServerSpec, log_dir: Path, body: Body) -> Memory:
    async with running(spec, log_dir) as server, open_channel(server.address) as channel:
        client = side_for(server, channel).client
        idle_kib = server.status_kib("VmRSS")
        picked = await client.pick(await client.push(body))
        peak_kib = server.status_kib("VmHWM")  # the body is held: picked, not yet pulled
        await client.pull(picked)
    return Memory(idle_kib / 1024, peak_kib / 1024)


async def peak_rss_rows(
    baseline: ServerSpec, kinference: ServerSpec, log_dir: Path, body: Body
) -> list[Row]:
    """(c) Peak RSS growth of a fresh server holding one big body (VmHWM minus idle VmRSS)."""
    base = await _peak_while_holding(baseline, log_dir, body)
    kinf = await _peak_while_holding(kinference, log_dir, body)
    allowance = 1.5 * body.length / MIB
    label = f"{body.length // MIB} MiB"
    for name, mem in (("baseline", base), ("kinference", kinf)):
        log(f"  {name:>10}: idle {mem.idle_mib:.1f} MiB, peak {mem.peak_mib:.1f} MiB")
    return [
        Row(
            f"(c) peak RSS minus idle, fresh server holding one {label} body (MiB)",
            f"{base.growth_mib:.1f}",
            f"{kinf.growth_mib:.1f}",
            f"{kinf.growth_mib / base.growth_mib:.2f}",
            f"≤ base + {allowance:.0f} MiB",
            verdict(kinf.growth_mib <= base.growth_mib + allowance),
        ),
        Row(
            "(c) idle RSS after readiness (MiB)",
            f"{base.idle_mib:.1f}",
            f"{kinf.idle_mib:.1f}",
            "",
            "",
            "info",
        ),
    ]

"""Benchmark kinference against a no-logic baseline server measured in the same run.

    python -m loadtest.bench_picker [--quick] [--duration S] [--strict]

The servers run as separate subprocesses on loopback; the load comes from this process
over one grpc.aio channel per server. Every figure is reported as a ratio against the
baseline, because absolute numbers on a small, noisy machine mean little.

Scenarios: (a) full-flow rate with 64 workers, and the same against the skeleton server
(`loadtest.skeleton_server`: kinference with a constant Pick and bare reports; "info"),
and kinference's flow in two calls with its extensions (pick on push, body inline, the
first report folded into the final one) against the baseline's five ("info");
(b) one big body pushed, picked and pulled (64 MiB; 16 MiB under --quick, and labelled
so); (c) peak RSS growth of a fresh server holding one big body. Rows marked "info" are
diagnostics without a target. A hidden --against-baseline flag runs the baseline on both
sides to check the harness: every ratio should come out near 1.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import traceback
from collections.abc import Awaitable
from dataclasses import replace
from pathlib import Path

import grpc
import uvloop

from loadtest.flow_rates import flow_rate_rows, two_call_rows
from loadtest.flows import Body, big_chat_body, open_channel
from loadtest.scenarios import (
    MIB,
    Pair,
    Row,
    Settings,
    big_body_rows,
    log,
    peak_rss_rows,
    side_for,
)
from loadtest.servers import (
    ServerDied,
    ServerSpec,
    baseline_spec,
    kinference_spec,
    running,
    skeleton_spec,
)

POLICY_YAML = """\
pools:
  - namespace: default
    name: chat
    endpoints: ["127.0.0.1:8000", "127.0.0.1:8001"]
    models: ["bench-model"]
"""


def settings_from(args: argparse.Namespace) -> Settings:
    if args.quick:
        return Settings(
            label="quick",
            workers=64,
            small_body_bytes=4096,
            warmup_s=0.5,
            ramp_s=0.2,
            measure_s=args.duration or 4.0,
            round_s=1.0,
            big_body_bytes=16 * MIB,
            big_reps=16,
        )
    return Settings(
        label="full",
        workers=64,
        small_body_bytes=4096,
        warmup_s=1.0,
        ramp_s=0.25,
        measure_s=args.duration or 20.0,
        round_s=1.5,
        big_body_bytes=64 * MIB,
        big_reps=21,
    )


async def guarded(scenario: str, rows: Awaitable[list[Row]]) -> list[Row]:
    """Run one scenario; an exception becomes a FAIL row instead of ending the benchmark."""
    log(f"{scenario} ...")
    try:
        return await rows
    except Exception as error:
        if not isinstance(error, ServerDied):
            traceback.print_exc(file=sys.stderr)
        return [Row(scenario, "", "", "", "", f"FAIL ({describe(error)})")]


def describe(error: Exception) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    first_line = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {first_line}"


async def shared_server_rows(
    settings: Settings, target: ServerSpec, baseline: ServerSpec, work: Path, big_body: Body
) -> list[Row]:
    """(a) and (b), against one long-lived server of each kind, alternating between them."""
    async with (
        running(baseline, work) as base_server,
        running(target, work) as kinf_server,
        running(skeleton_spec(), work) as skel_server,
        open_channel(base_server.address) as base_channel,
        open_channel(kinf_server.address) as kinf_channel,
        open_channel(skel_server.address) as skel_channel,
    ):
        base_side = side_for(base_server, base_channel)
        pair = Pair(base_side, side_for(kinf_server, kinf_channel))
        rows = await guarded("(a) full flow rate", flow_rate_rows(pair, settings))
        rows += await guarded("(a) two-call flow", two_call_rows(pair, settings))
        skeleton = Pair(base_side, side_for(skel_server, skel_channel))
        rows += await guarded("(a) skeleton", skeleton_rows(skeleton, settings))
        rows += await guarded(
            f"(b) {settings.big_label} body", big_body_rows(pair, settings, big_body)
        )
    return rows


async def skeleton_rows(pair: Pair, settings: Settings) -> list[Row]:
    """(a) again with the skeleton (kinference with a constant Pick and bare reports) in
    kinference's place: its ratio is what the server and the body handling cost; the rest
    of kinference's gap is parsing, routing and the reports' bookkeeping."""
    rows = await flow_rate_rows(pair, settings)
    return [
        replace(
            row, scenario=row.scenario.replace("(a)", "(a) skeleton:"), target="", verdict="info"
        )
        for row in rows[:2]
    ]


async def run(
    settings: Settings, target: ServerSpec, baseline: ServerSpec, work: Path
) -> list[Row]:
    big_body = big_chat_body(settings.big_body_bytes)
    rows = await guarded(
        "(a)+(b) servers", shared_server_rows(settings, target, baseline, work, big_body)
    )
    rows += await guarded(
        f"(c) peak RSS, {settings.big_label} body",
        peak_rss_rows(baseline, target, work, big_body),
    )
    return rows


def render(rows: list[Row], title: str) -> str:
    header = ("scenario", "baseline", "kinference", "ratio", "target", "result")
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|---|--:|--:|--:|---|---|"]
    for row in rows:
        cells = (row.scenario, row.baseline, row.kinference, row.ratio, row.target, row.verdict)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="finish in under a minute")
    parser.add_argument(
        "--duration", type=float, default=None, help="measured seconds per server for (a)"
    )
    parser.add_argument("--strict", action="store_true", help="exit non-zero on any FAIL")
    # Harness self-test: the baseline plays both sides, so every ratio should be about 1.
    parser.add_argument("--against-baseline", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = settings_from(args)
    with tempfile.TemporaryDirectory(prefix="kinference-bench-") as tmp:
        work = Path(tmp)
        config = work / "policy.yaml"
        config.write_text(POLICY_YAML)
        target = baseline_spec("kinference") if args.against_baseline else kinference_spec(config)
        try:
            rows = uvloop.run(run(settings, target, baseline_spec(), work))
        except KeyboardInterrupt:
            log("interrupted; servers stopped")
            return 130
    title = f"kinference vs baseline ({settings.label} settings, big body {settings.big_label})"
    if args.against_baseline:
        title += " — SELF-TEST: the kinference column is the baseline server"
    print(render(rows, title))
    failed = any(row.verdict.startswith("FAIL") for row in rows)
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())

"""Routing quality in front of the same 8 simulated engines, at rising request rates.

    python -m loadtest.bench_routing [--quick] [--out docs/benchmarks.md]

Routers: kinference with 1 replica, 4 replicas sharing Redis, 4 replicas without; round-robin
and random (in the load generator); sglang-router and vllm-router with `cache_aware`, when
installed (`pip install '.[bench]'`). Each (router, rate) run gets fresh engines (cold
caches) and replays the same conversations (`workload.py`: shared system prompts, multi-turn
chats, long-document QA; Poisson arrivals; one seed). For kinference the load generator is
the gateway (Push, Pick, Pull, POST, reports). Writes a Markdown section into `--out`
(between markers, the rest of the file kept) and a PNG chart beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop
import yaml

from loadtest.redis_server import RedisServer
from loadtest.routing_bench import report
from loadtest.routing_bench.engines import EngineSetup
from loadtest.routing_bench.routers import ROUTERS, Bench, Router, available, log
from loadtest.routing_bench.runner import RunPlan, run
from loadtest.routing_bench.stats import RunStats
from loadtest.routing_bench.workload import BenchSpec, conversations

FULL_ROUTERS = ("kinference", "kinference-4-redis", "kinference-4", "round_robin", "random",
                "sglang", "vllm")  # fmt: skip
QUICK_ROUTERS = ("kinference", "round_robin", "sglang")
# Engine regimes (`--regime`): the project's simulated engines with few batch slots, with
# vLLM-like large batches (prefill-dominated TTFT), and a mixed pool where half the engines
# take twice as long for everything.
REGIMES: dict[str, dict[str, Any]] = {
    "few-slots": {"max_num_seqs": 4, "slow_fraction": 0.0},
    "vllm-64": {"max_num_seqs": 64, "slow_fraction": 0.0},
    "mixed": {"max_num_seqs": 4, "slow_fraction": 0.5},
}


@dataclass(frozen=True)
class Options:
    routers: tuple[Router, ...]
    skipped: tuple[str, ...]  # routers asked for but not installed
    rates: tuple[float, ...]
    duration_s: float  # of arrivals per run; requests = rate x duration
    seed: int
    engines: EngineSetup
    out: Path | None
    chart: Path | None
    label: str
    tuning: dict[str, Any]
    spec: BenchSpec


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--quick", action="store_true", help="1 rate, 3 routers, short (< 1 min)")
    cli.add_argument(
        "--out", type=Path, default=None, help="Markdown file to write the section into"
    )
    cli.add_argument(
        "--chart", type=Path, default=None, help="PNG (default: routing-benchmark.png beside --out)"
    )
    cli.add_argument("--routers", default="", help=f"comma-separated of {', '.join(ROUTERS)}")
    cli.add_argument("--rates", default="", help="requests/s, comma-separated")
    cli.add_argument("--duration", type=float, default=0.0, help="seconds of arrivals per run")
    cli.add_argument("--seed", type=int, default=1)
    cli.add_argument("--capacity-blocks", type=int, default=1536, help="per engine, 64 chars each")
    cli.add_argument(
        "--regime",
        choices=sorted(REGIMES),
        default="few-slots",
        help="engine batch slots and speeds (see REGIMES)",
    )
    cli.add_argument("--time-scale", type=float, default=1.0, help="wall s per model s")
    cli.add_argument(
        "--tuning",
        default="",
        help="YAML mapping merged over the policy's routing: (an extra, labelled "
        "run; the benchmark runs the shipped defaults)",
    )
    return cli.parse_args(argv)  # fmt: skip


def options_from(args: argparse.Namespace) -> Options:
    keys = (
        tuple(args.routers.split(","))
        if args.routers
        else (QUICK_ROUTERS if args.quick else FULL_ROUTERS)
    )
    unknown = [key for key in keys if key not in ROUTERS]
    if unknown:
        raise SystemExit(f"unknown routers {unknown}; choose from {', '.join(ROUTERS)}")
    rates = (
        tuple(float(r) for r in args.rates.split(","))
        if args.rates
        else ((12.0,) if args.quick else (6.0, 12.0, 18.0))
    )
    routers = tuple(ROUTERS[key] for key in keys)
    chart = args.chart or (args.out.with_name("routing-benchmark.png") if args.out else None)
    return Options(
        routers=tuple(r for r in routers if available(r)),
        skipped=tuple(r.label for r in routers if not available(r)),
        rates=rates,
        duration_s=args.duration or (6.0 if args.quick else 30.0),
        seed=args.seed,
        engines=EngineSetup(
            capacity_blocks=args.capacity_blocks,
            max_num_seqs=REGIMES[args.regime]["max_num_seqs"],
            slow_fraction=REGIMES[args.regime]["slow_fraction"],
            time_scale=args.time_scale,
            seed=args.seed,
        ),
        out=args.out,
        chart=chart,
        label=("quick" if args.quick else "full") + f", regime {args.regime}",
        tuning=yaml.safe_load(args.tuning) if args.tuning else {},
        spec=BenchSpec.quick() if args.quick else BenchSpec(),
    )


@contextlib.contextmanager
def redis_if_needed(options: Options) -> Iterator[RedisServer | None]:
    if not any(router.shared for router in options.routers):
        yield None
        return
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


async def run_all(options: Options) -> list[RunStats]:
    results: list[RunStats] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-routing-") as work,
        redis_if_needed(options) as redis_server,
    ):
        bench = Bench(
            options.engines.capacity_blocks, options.tuning, Path(work), redis_server, options.seed
        )
        for rate in options.rates:
            requests = round(rate * options.duration_s)
            plan_conversations = conversations(options.spec, requests, rate, options.seed)
            for router in options.routers:
                results.append(
                    await run(RunPlan(router, rate, plan_conversations), options.engines, bench)
                )
    return results


def section(options: Options, results: list[RunStats], seconds: float) -> str:
    """The Markdown section: how the run was made, the table, the verdicts, the chart."""
    engines = options.engines
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    skipped = f" Not installed, not run: {', '.join(options.skipped)}." if options.skipped else ""
    tuning = yaml.safe_dump({"routing": options.tuning}, default_flow_style=None, sort_keys=False)
    lines = [
        "## Routing quality: kinference vs baselines and peer routers",
        "",
        "```sh",
        ".venv/bin/pip install -e '.[bench]'   # the peer routers",
        ".venv/bin/python -m loadtest.bench_routing --out docs/benchmarks.md   # --quick: < 1 min",
        "```",
        "",
        f"Run of {when} ({options.label}, seed {options.seed}, {seconds / 60:.1f} min, "
        f"Python {platform.python_version()}, 2 cores shared with other work).{skipped}",
        "",
        f"{engines.count} simulated engines (`loadtest/sim_engine`, in their own process), each "
        f"with a prefix cache of {engines.capacity_blocks} blocks of 64 characters and "
        f"{engines.max_num_seqs} batch slots, time scale {engines.time_scale:g}"
        f"{_slow(engines)}; fresh engines "
        f"for every run; {options.duration_s:g} s of Poisson arrivals per run, then every "
        "conversation to its end. Workload: shared system prompts, multi-turn chats re-sending "
        "the engine's real replies, questions on long documents (`routing_bench/workload.py`). "
        "TTFT is measured by the load generator from the first call (PushBody for kinference, "
        "which acts as the gateway; the POST for the others) to the first content chunk. Hit "
        "rate: cached / prompt tokens from the responses' usage; the engines' own counters "
        "(engine hit rate) must agree. Imbalance: requests of the busiest engine over the mean.",
        "",
        report.table(results),
        "",
        *report.verdicts(results),
        "",
    ]
    if options.tuning:
        title = "Policy tuning of this run (an extra, labelled run; merged over the defaults):"
        lines += ["", title, "", "```yaml", tuning.rstrip(), "```"]
    else:
        lines += ["", "Policy: the shipped defaults (no `routing:` section)."]
    if options.chart is not None and options.out is not None:
        lines += ["", f"![TTFT p90 and hit rate by rate]({options.chart.name})"]
    return "\n".join(lines)


def _slow(engines: EngineSetup) -> str:
    if not engines.slow_fraction:
        return ""
    return f", {engines.slow_fraction:.0%} of them {engines.slow_factor:g}x slower at everything"


def main(argv: list[str] | None = None) -> int:
    options = options_from(parse_args(argv))
    if options.skipped:
        log(f"not installed, skipped: {', '.join(options.skipped)} (pip install '.[bench]')")
    started = time.perf_counter()
    results = uvloop.run(run_all(options))
    text = section(options, results, time.perf_counter() - started)
    print(text)
    if options.out is not None:
        report.replace_section(options.out, text)
    if options.chart is not None:
        report.chart(results, options.chart)
    failed = sum(stats.errors for stats in results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

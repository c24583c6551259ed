"""Routing quality in front of the same engines, at rising request rates.

    python -m loadtest.bench_routing [--quick] [--regime R] [--out docs/benchmarks.md]
        [--json run.json] [--requests requests.jsonl] [--seed N | --seeds 1,2,3]

Routers: kinference as deployed (`kinference gateway` with its in-process picker, 1 replica;
4 gateways sharing Redis), the shipped routing defaults; round-robin and least-in-flight
(in the load generator); sglang-router and vllm-router with `cache_aware`, when installed
(`pip install '.[bench]'`); on Dynamo's mock engines also Dynamo's own KV router and
kinference in precise prefix mode. Each (router, rate) run gets fresh engines (cold
caches) and replays the same conversations (`workload.py`: shared system prompts,
multi-turn chats, long-document QA; Poisson arrivals; one seed, or with `--seeds` the
whole run once per seed, reported pooled: `pooled.py`). Writes a Markdown section
into `--out` (between markers, the rest of the file kept), a PNG chart beside it, and the
figures as JSON (`--json`) for `python -m loadtest.routing_bench.ranges`, and each request
(`--requests`: router, rate, conversation and turn, TTFT, prompt and cached tokens), so
two routers' placements and times compare request by request.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop
import yaml

from loadtest.mocker_engines import MockerSetup
from loadtest.redis_server import RedisServer
from loadtest.routing_bench import report
from loadtest.routing_bench.console import log
from loadtest.routing_bench.engines import EngineSetup
from loadtest.routing_bench.fleets import Fleet, MockerFleet, SimFleet, reseeded
from loadtest.routing_bench.replicas import Bench
from loadtest.routing_bench.routers import ROUTERS, Router, unavailable
from loadtest.routing_bench.runner import RunPlan, run
from loadtest.routing_bench.section import charted, section
from loadtest.routing_bench.stats import RunStats
from loadtest.routing_bench.workload import MODEL, BenchSpec, conversations

FULL_ROUTERS = (
    "kinference", "kinference-4-redis", "round_robin", "least_inflight", "sglang", "vllm",
    "dynamo", "kinference-precise",
)  # fmt: skip
QUICK_ROUTERS = ("kinference", "round_robin", "sglang", "dynamo")
# Engine regimes (`--regime`): the project's simulated engines with few batch slots, with
# vLLM-like large batches (prefill-dominated TTFT), a mixed pool where half the engines
# take twice as long for everything; and Dynamo's mock engines.
REGIMES: dict[str, dict[str, Any]] = {
    "few-slots": {"max_num_seqs": 4, "slow_fraction": 0.0},
    "vllm-64": {"max_num_seqs": 64, "slow_fraction": 0.0},
    "mixed": {"max_num_seqs": 4, "slow_fraction": 0.5},
    "dynamo": {"max_num_seqs": 8},
}
SIM_RATES = (6.0, 12.0, 18.0)
# 4 mockers of 8 sequences: light load, busy, past what they serve.
MOCKER_RATES = (3.0, 6.0, 9.0)
# The tiny tokenizer makes ~1.6 characters a token: documents of ~5k tokens and system
# prompts of ~1.9k, so that the 4 documents and 4 prompts (~29k tokens) fit the pool's
# caches (4 x 16k) when each stays on one engine, and thrash them when spread.
MOCKER_SPEC = {"document_chars": 8_000, "system_chars": 3_000}


@dataclass(frozen=True)
class Options:
    routers: tuple[Router, ...]
    skipped: tuple[str, ...]  # routers asked for that cannot run here, and why
    rates: tuple[float, ...]
    duration_s: float  # of arrivals per run; requests = rate x duration
    drain: bool  # every conversation to its end, else nothing sent after duration_s
    seeds: tuple[int, ...]  # a run of every (rate, router) per seed; one: `--seed`
    fleet: Fleet
    out: Path | None
    chart: Path | None
    json: Path | None
    requests: Path | None
    label: str
    regime: str
    tuning: dict[str, Any]
    spec: BenchSpec
    command: str


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--quick", action="store_true", help="1 rate, 4 routers, short (< 1 min)")
    cli.add_argument("--out", type=Path, default=None, help="Markdown file for the section")
    cli.add_argument("--chart", type=Path, default=None, help="PNG (default: beside --out)")
    cli.add_argument("--json", type=Path, default=None, help="the figures, for `ranges`")
    cli.add_argument("--requests", type=Path, default=None, help="per request, JSON lines")
    cli.add_argument("--routers", default="", help=f"comma-separated of {', '.join(ROUTERS)}")
    cli.add_argument("--rates", default="", help="requests/s, comma-separated")
    cli.add_argument("--duration", type=float, default=0.0, help="seconds of arrivals per run")
    cli.add_argument("--seed", type=int, default=1)
    cli.add_argument(
        "--seeds",
        default="",
        help="comma-separated: everything once per seed, the figures pooled (over --seed)",
    )
    cli.add_argument(
        "--drain",
        action="store_true",
        help="every conversation to its end (default: no request sent after the arrivals window)",
    )
    cli.add_argument(
        "--regime",
        choices=sorted(REGIMES),
        default="few-slots",
        help="engines: batch slots and speeds (see REGIMES), or Dynamo's mockers",
    )
    cli.add_argument("--engines", type=int, default=0, help="default 8 (sim), 4 (mockers)")
    cli.add_argument("--capacity-blocks", type=int, default=1536, help="sim: 64 chars each")
    cli.add_argument("--gpu-blocks", type=int, default=1024, help="mocker: 16 tokens each")
    cli.add_argument("--time-scale", type=float, default=1.0, help="sim: wall s per model s")
    cli.add_argument(
        "--prefill-side-by-side",
        action="store_true",
        help="sim: every prompt prefills on its own (the simulator before h102)",
    )
    cli.add_argument("--dynamo", type=Path, default=Path("/tmp/dynamo-venv"))
    cli.add_argument("--dynamo-model", type=Path, default=Path("/tmp/dynamo-model"))
    cli.add_argument(
        "--tuning",
        default="",
        help="YAML mapping merged over the policy's "
        "routing: (an extra, labelled run; the benchmark runs the shipped defaults)",
    )
    return cli.parse_args(argv)  # fmt: skip


def fleet_from(args: argparse.Namespace) -> Fleet:
    regime = REGIMES[args.regime]
    if args.regime == "dynamo":
        setup = MockerSetup(
            args.dynamo, args.dynamo_model, MODEL, count=args.engines or 4,
            gpu_blocks=args.gpu_blocks, max_num_seqs=regime["max_num_seqs"],
        )  # fmt: skip
        return MockerFleet(setup)
    return SimFleet(
        EngineSetup(
            count=args.engines or 8,
            capacity_blocks=args.capacity_blocks,
            max_num_seqs=regime["max_num_seqs"],
            slow_fraction=regime["slow_fraction"],
            time_scale=args.time_scale,
            seed=args.seed,
            prefill_side_by_side=args.prefill_side_by_side,
        )
    )


def options_from(args: argparse.Namespace, argv: list[str] | None = None) -> Options:
    fleet = fleet_from(args)
    asked = bool(args.routers)
    keys = tuple(args.routers.split(",")) if asked else (
        QUICK_ROUTERS if args.quick else FULL_ROUTERS
    )  # fmt: skip
    unknown = [key for key in keys if key not in ROUTERS]
    if unknown:
        raise SystemExit(f"unknown routers {unknown}; choose from {', '.join(ROUTERS)}")
    routers = [ROUTERS[key] for key in keys]
    why = {router.key: unavailable(router, fleet) for router in routers}
    # Routers of the default lists that need another regime are left out without a word.
    skipped = tuple(
        f"{r.label} ({why[r.key]})"
        for r in routers
        if why[r.key] and (asked or "regime" not in why[r.key])
    )
    mocker = fleet.kind == "mocker"
    default_rates = MOCKER_RATES if mocker else SIM_RATES
    rates = tuple(float(r) for r in args.rates.split(",")) if args.rates else (
        (default_rates[1],) if args.quick else default_rates
    )  # fmt: skip
    spec = BenchSpec.quick() if args.quick else BenchSpec()
    if mocker:
        spec = dataclasses.replace(spec, **MOCKER_SPEC)
    chart = args.chart or (args.out.with_name("routing-benchmark.png") if args.out else None)
    return Options(
        routers=tuple(r for r in routers if not why[r.key]),
        skipped=skipped,
        rates=rates,
        duration_s=args.duration or (6.0 if args.quick else 15.0),
        drain=args.drain,
        seeds=tuple(int(s) for s in args.seeds.split(",")) if args.seeds else (args.seed,),
        fleet=fleet,
        out=args.out,
        chart=chart,
        json=args.json,
        requests=args.requests,
        label=("quick" if args.quick else "full") + f", regime {args.regime}",
        regime=args.regime,
        tuning=yaml.safe_load(args.tuning) if args.tuning else {},
        spec=spec,
        command=" ".join(["python -m loadtest.bench_routing", *(argv or [])]),
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
        for seed in options.seeds:
            bench = Bench(options.tuning, Path(work), redis_server, seed)
            fleet = reseeded(options.fleet, seed)
            for rate in options.rates:
                requests = round(rate * options.duration_s)
                plan_conversations = conversations(options.spec, requests, rate, seed)
                for router in options.routers:
                    window = None if options.drain else options.duration_s
                    plan = RunPlan(
                        router, rate, plan_conversations, window, options.requests,
                        measured_s=options.duration_s,
                    )  # fmt: skip
                    results.append(await run(plan, fleet, bench))
    return results


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    options = options_from(parse_args(args_list), args_list)
    if options.skipped:
        log(f"not run: {', '.join(options.skipped)}")
    started = time.perf_counter()
    results = uvloop.run(run_all(options))
    seconds = time.perf_counter() - started
    text = section(options, results, seconds)
    print(text)
    if options.out is not None:
        report.replace_section(options.out, text)
    if options.chart is not None:
        report.chart(charted(options, results), options.chart)
    if options.json is not None:
        meta = {"regime": options.regime, "seed": options.seeds[0], "minutes": seconds / 60,
                "seeds": list(options.seeds),
                "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "command": options.command, "duration_s": options.duration_s}  # fmt: skip
        report.dump(results, meta, options.json)
    failed = sum(stats.errors for stats in results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

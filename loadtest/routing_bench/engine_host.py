"""`python -m loadtest.routing_bench.engine_host`: the benchmark's engines in one process.

Like `python -m loadtest.sim_engine`, with the knobs the benchmark sets beyond its CLI
(the stream step), on any free ports. Prints one JSON line `{"urls": [...]}` once every
engine serves, then serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import signal
import sys

import uvloop

from loadtest.engine_model import Timing
from loadtest.sim_engine import SimEngineConfig, SimEngines
from loadtest.sim_engine.server import SimEngine, engine_seed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--count", type=int, default=8)
    cli.add_argument("--seed", type=int, default=0)
    cli.add_argument("--time-scale", type=float, default=1.0)
    cli.add_argument("--capacity-blocks", type=int, default=1536)
    cli.add_argument("--max-num-seqs", type=int, default=4)
    cli.add_argument("--stream-step-s", type=float, default=0.1, help="tokens per SSE chunk")
    cli.add_argument("--slow-fraction", type=float, default=0.0, help="share of slow engines")
    cli.add_argument("--slow-factor", type=float, default=2.0, help="their slowdown")
    cli.add_argument(
        "--prefill-side-by-side", action="store_true", help="the old simulator's prefill"
    )
    return cli.parse_args(argv)


def config_from(args: argparse.Namespace) -> SimEngineConfig:
    return SimEngineConfig(
        seed=args.seed,
        time_scale=args.time_scale,
        capacity_blocks=args.capacity_blocks,
        max_num_seqs=args.max_num_seqs,
        stream_step_s=args.stream_step_s,
        prefill_side_by_side=args.prefill_side_by_side,
    )


async def serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    config = config_from(args)
    fleet = SimEngines(args.count, config)
    slow = round(args.count * args.slow_fraction)
    slower = dataclasses.replace(config, timing=_scaled(config.timing, args.slow_factor))
    for index in range(args.count - slow, args.count):  # the last `slow` engines
        fleet.engines[index] = SimEngine(slower.with_seed(engine_seed(config.seed, index)))
    async with fleet:
        print(json.dumps({"urls": fleet.urls}), flush=True)
        await stop.wait()


def _scaled(timing: Timing, factor: float) -> Timing:
    """The same engine, `factor` times slower at every step."""
    return dataclasses.replace(
        timing,
        prefill_base_s=timing.prefill_base_s * factor,
        prefill_s_per_token=timing.prefill_s_per_token * factor,
        decode_gap_s=timing.decode_gap_s * factor,
        decode_gap_s_per_seq=timing.decode_gap_s_per_seq * factor,
    )


def main(argv: list[str] | None = None) -> int:
    uvloop.run(serve(parse_args(argv)))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())

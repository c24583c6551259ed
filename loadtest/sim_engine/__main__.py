"""`python -m loadtest.sim_engine`: serve simulated engines until SIGINT or SIGTERM.

    python -m loadtest.sim_engine --port 8000 --count 8 --time-scale 0.05

prints one line per engine, `engine <i> <url> seed=<seed>`, once all are serving.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence

from loadtest.sim_engine.config import DEFAULT_MODEL, SimEngineConfig
from loadtest.sim_engine.server import SimEngine, SimEngines


def parser() -> argparse.ArgumentParser:
    defaults = SimEngineConfig()
    cli = argparse.ArgumentParser(
        prog="python -m loadtest.sim_engine",
        description="Simulated OpenAI-compatible inference engines (vLLM-style /metrics).",
    )
    cli.add_argument("--host", default="127.0.0.1")
    cli.add_argument("--port", type=int, default=8000, help="first port; 0: any free port")
    cli.add_argument("--count", type=int, default=1, help="engines, on consecutive ports")
    cli.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="NAME",
        help=f"a model served (repeatable; default {DEFAULT_MODEL})",
    )
    cli.add_argument("--seed", type=int, default=defaults.seed)
    cli.add_argument(
        "--time-scale",
        type=float,
        default=defaults.time_scale,
        help="model seconds -> wall seconds; 1.0 real time, 0.05 twenty times faster",
    )
    cli.add_argument(
        "--capacity-blocks",
        type=int,
        default=defaults.capacity_blocks,
        help=f"prefix-cache blocks of {defaults.block_chars} characters per engine",
    )
    cli.add_argument("--max-num-seqs", type=int, default=defaults.max_num_seqs)
    cli.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=defaults.max_num_batched_tokens,
        help="prompt tokens prefilled per step; prompts prefill in turn (vLLM's default)",
    )
    cli.add_argument(
        "--prefill-side-by-side",
        action="store_true",
        help="prefill every admitted prompt on its own at full speed (the old simulator)",
    )
    cli.add_argument(
        "--stream-step-s",
        type=float,
        default=defaults.stream_step_s,
        help="tokens due within this many seconds go out in one SSE chunk",
    )
    cli.add_argument(
        "--api-key", default=None, help="provider mode: require 'Authorization: Bearer KEY'"
    )
    return cli


def config_from(args: argparse.Namespace) -> SimEngineConfig:
    return SimEngineConfig(
        models=tuple(args.models or (DEFAULT_MODEL,)),
        seed=args.seed,
        time_scale=args.time_scale,
        capacity_blocks=args.capacity_blocks,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        prefill_side_by_side=args.prefill_side_by_side,
        api_key=args.api_key,
        stream_step_s=args.stream_step_s,
    )


async def serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with SimEngines(args.count, config_from(args), host=args.host, port=args.port) as fleet:
        for i, engine in enumerate(fleet):
            _announce(i, engine)
        await stop.wait()


def _announce(index: int, engine: SimEngine) -> None:
    print(f"engine {index} {engine.url} seed={engine.config.seed}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    if args.count < 1:
        cli.error("--count must be >= 1")
    try:
        config_from(args)
    except ValueError as exc:
        cli.error(str(exc))
    try:
        import uvloop
    except ImportError:  # stay runnable without uvloop
        asyncio.run(serve(args))
    else:
        uvloop.run(serve(args))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())

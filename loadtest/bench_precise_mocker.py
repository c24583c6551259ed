"""Precise against approximate prefix mode, on Dynamo's mock engines whose caches thrash.

    python -m loadtest.bench_precise_mocker [--rates 2,6] [--duration 20]
        [--dynamo /tmp/dynamo-venv] [--model /tmp/dynamo-model]

Per rate and mode: 4 fresh mockers (`loadtest.mocker_engines`: vLLM-like scheduler and KV
block manager, 1024 blocks of 16 tokens each, 8 sequences), one kinference picker in this
process with the shipped defaults and one pool over them, in `approximate` or `precise` mode
(the mockers' own KV events, their tokenizer and chat template). The routing benchmark's
workload (shared system prompts, multi-turn chats re-sending the real replies, long-document
QA; `routing_bench/workload.py`), the load generator acting as the gateway (Push, Pick,
Pull, POST, reports). Reported per run: hit rate (cached / prompt tokens from the responses'
usage), TTFT p50 / p90, requests per engine (max over mean), and for precise mode the share
of precise predictions within one block (16 tokens) of the `cached_tokens` the engine then
reported (`kinference_prefix_precise_error_tokens`), and how many Picks used them.
"""

from __future__ import annotations

import argparse
import collections
import sys
from dataclasses import dataclass
from pathlib import Path

import uvloop
from prometheus_client import CollectorRegistry

from kinference.app import App
from kinference.config import parse_policy
from kinference.settings import Settings
from loadtest.mocker_engines import EVENTS_OFFSET, MockerSetup, mockers
from loadtest.routing_bench.drivers import GatewayDriver
from loadtest.routing_bench.replay import Replay
from loadtest.routing_bench.stats import quantile
from loadtest.routing_bench.workload import MODEL, BenchSpec, conversations

ERROR = "kinference_prefix_precise_error_tokens"


@dataclass(frozen=True)
class Result:
    mode: str
    rate: float
    requests: int
    errors: int
    hit_rate: float
    ttft_p50_ms: float
    ttft_p90_ms: float
    imbalance: float
    route_p50_ms: float  # Push + Pick + Pull, part of the TTFT (tokenizing, in precise mode)
    within_block: float  # share of precise predictions within one block of the report
    precise_predictions: int


def policy(mode: str, endpoints: list[str], model_dir: Path) -> str:
    listed = ", ".join(f'"{e}"' for e in endpoints)
    prefix = "{mode: approximate}"
    if mode == "precise":
        prefix = (
            f'{{mode: precise, events: "tcp://{{host}}:{{port+{EVENTS_OFFSET}}}", '
            f"tokenizer: {model_dir / 'tokenizer.json'}, "
            f"chat_template: {model_dir / 'tokenizer_config.json'}, block_size: 16}}"
        )
    pool = f'  - name: mock\n    endpoints: [{listed}]\n    models: ["{MODEL}"]\n'
    return f"pools:\n{pool}    prefix: {prefix}\n"


async def run(mode: str, rate: float, args: argparse.Namespace) -> Result:
    setup = MockerSetup(args.dynamo, args.model, MODEL, gpu_blocks=args.gpu_blocks)
    # Documents of ~10k tokens (the tiny tokenizer makes ~1.6 characters a token): one fills
    # most of an engine's 16k-token cache, so four documents and the chats thrash them.
    spec = BenchSpec(document_chars=args.doc_chars)
    plan = conversations(spec, round(rate * args.duration), rate, args.seed)
    with mockers(setup) as engines:
        endpoints = [engine.endpoint for engine in engines]
        app = App(
            Settings(listen="127.0.0.1:0", metrics_listen=""),
            parse_policy(policy(mode, endpoints, args.model)),
            CollectorRegistry(),
        )
        await app.start()
        driver = GatewayDriver([f"127.0.0.1:{app.port}"])
        try:
            replay = Replay(driver)
            await replay.run(plan)
        finally:
            await driver.close()
            await app.server.stop(None)
            await app.close()
        registry = app.metrics.registry
        count = registry.get_sample_value(f"{ERROR}_count") or 0.0
        within = registry.get_sample_value(f"{ERROR}_bucket", {"le": "16.0"}) or 0.0
    done = [s for s in replay.samples if not s.error]
    prompt = sum(s.prompt_tokens for s in done)
    per_engine = collections.Counter(s.engine for s in done)
    mean = sum(per_engine.values()) / len(engines)
    ttfts = [s.ttft_s * 1000 for s in done]
    errors = [s.error for s in replay.samples if s.error]
    if errors:
        print(f"{mode} @ {rate}: {len(errors)} errors, first: {errors[0]}", file=sys.stderr)
    return Result(
        mode,
        rate,
        len(done),
        len(errors),
        sum(s.cached_tokens for s in done) / prompt if prompt else 0.0,
        quantile(ttfts, 0.5),
        quantile(ttfts, 0.9),
        max(per_engine.values()) / mean if mean else 0.0,
        quantile([s.route_s * 1000 for s in done], 0.5),
        within / count if count else 0.0,
        int(count),
    )


def table(results: list[Result]) -> str:
    lines = [
        "| rate (req/s) | mode | requests | hit rate | TTFT p50 (ms) | TTFT p90 (ms) | "
        "imbalance | route p50 (ms) | precise predictions within 1 block |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        within = f"{r.within_block:.3f} of {r.precise_predictions}" if r.mode == "precise" else ""
        lines.append(
            f"| {r.rate:g} | {r.mode} | {r.requests} ({r.errors} errors) | {r.hit_rate:.3f} | "
            f"{r.ttft_p50_ms:.0f} | {r.ttft_p90_ms:.0f} | {r.imbalance:.2f} | "
            f"{r.route_p50_ms:.1f} | {within} |"
        )
    return "\n".join(lines)


async def run_all(args: argparse.Namespace) -> list[Result]:
    results = []
    for rate in (float(r) for r in args.rates.split(",")):
        for mode in ("approximate", "precise"):
            result = await run(mode, rate, args)
            print(table([result]).splitlines()[-1], file=sys.stderr, flush=True)
            results.append(result)
    return results


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--rates", default="2,6")
    cli.add_argument("--duration", type=float, default=20.0, help="seconds of arrivals")
    cli.add_argument("--seed", type=int, default=1)
    cli.add_argument("--gpu-blocks", type=int, default=1024, help="per engine, 16 tokens each")
    cli.add_argument("--doc-chars", type=int, default=16_000)
    cli.add_argument("--dynamo", type=Path, default=Path("/tmp/dynamo-venv"))
    cli.add_argument("--model", type=Path, default=Path("/tmp/dynamo-model"))
    args = cli.parse_args(argv)
    print(table(uvloop.run(run_all(args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

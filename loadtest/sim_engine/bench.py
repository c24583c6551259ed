"""What simulated engines cost the machine: `python -m loadtest.sim_engine.bench`.

Starts `--count` engines in a child process (`python -m loadtest.sim_engine`), streams chat
requests at them at a fixed rate from this process, round-robin, and prints the engines'
CPU time per request and per token, and how far client-side latencies are from the cost
model's own (the overhead of HTTP, SSE and a busy event loop). `--quick` runs 3 seconds.
Linux only: CPU time is read from /proc.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import uvloop

from kinference.workers.parse import parse_samples
from loadtest.engine_model import Timing

_ROOT = Path(__file__).resolve().parents[2]
_PREFIXES = 16  # distinct shared system prompts, so the prefix caches see reuse


@dataclass
class Tally:
    ttft_s: list[float] = field(default_factory=list)
    e2e_s: list[float] = field(default_factory=list)
    chunks: int = 0
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    engine_ttft_s: float = math.nan


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_engines(args: argparse.Namespace) -> tuple[subprocess.Popen[str], list[str]]:
    command = [sys.executable, "-m", "loadtest.sim_engine", "--port", "0"]
    command += ["--count", str(args.count), "--time-scale", str(args.time_scale)]
    process = subprocess.Popen(command, cwd=_ROOT, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    urls = [process.stdout.readline().split()[2] for _ in range(args.count)]
    return process, urls


async def one(client: httpx.AsyncClient, index: int, tokens: int, tally: Tally) -> None:
    system = f"system prompt {index % _PREFIXES} " * 40
    body = {
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": str(index)},
        ],
        "max_tokens": tokens,
        "stream": True,
    }
    started = time.perf_counter()
    first = None
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    first = first or time.perf_counter()
                    tally.chunks += 1
    except httpx.HTTPError as exc:
        tally.errors[type(exc).__name__] += 1
        return
    assert first is not None
    tally.ttft_s.append(first - started)
    tally.e2e_s.append(time.perf_counter() - started)


async def drive(args: argparse.Namespace, urls: list[str]) -> tuple[Tally, float]:
    tally = Tally()
    async with contextlib.AsyncExitStack() as stack:
        # One client per engine: httpx's pool is scanned per request, so small pools are cheaper.
        clients = [
            await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=60))
            for url in urls
        ]
        tasks: list[asyncio.Task[None]] = []
        start = time.perf_counter()
        total = int(args.rate * args.seconds)
        for i in range(total):
            delay = start + i / args.rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            work = one(clients[i % len(clients)], i, args.tokens, tally)
            tasks.append(asyncio.create_task(work))
        await asyncio.gather(*tasks)
        wall_s = time.perf_counter() - start
        tally.engine_ttft_s = await engine_ttft_s(clients)
        return tally, wall_s


async def engine_ttft_s(clients: list[httpx.AsyncClient]) -> float:
    """Mean TTFT as the engines measured it (arrival to first token), from /metrics."""
    names = ["vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count"]
    total = count = 0.0
    for client in clients:
        found = parse_samples((await client.get("/metrics")).text, names)
        total += sum(sample.value for sample in found[names[0]])
        count += sum(sample.value for sample in found[names[1]])
    return total / count if count else math.nan


def quantile(values: Sequence[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q * 100) - 1] if len(values) > 1 else values[0]


def report(
    args: argparse.Namespace, tally: Tally, wall_s: float, cpu_s: float, client_cpu_s: float
) -> None:
    done = len(tally.e2e_s)
    timing = Timing()
    model_e2e = (args.tokens - 1) * timing.decode_gap_s * args.time_scale
    print(f"engines={args.count} time_scale={args.time_scale} tokens={args.tokens}")
    errors = sum(tally.errors.values())
    print(f"requests={done} errors={errors} rate={done / wall_s:.1f}/s chunks={tally.chunks}")
    if errors:
        print(f"errors by kind: {dict(tally.errors)}")
    print(
        f"engine CPU: {cpu_s / wall_s:.0%} of one core, {cpu_s / max(done, 1) * 1e3:.2f} ms/request"
    )
    print(f"engine CPU per streamed token: {cpu_s / max(done * args.tokens, 1) * 1e6:.0f} us")
    print(f"load generator (httpx) CPU: {client_cpu_s / wall_s:.0%} of one core")
    if done:
        print(
            f"client TTFT p50={quantile(tally.ttft_s, 0.5) * 1e3:.1f} ms"
            f" p99={quantile(tally.ttft_s, 0.99) * 1e3:.1f} ms;"
            f" e2e p50={quantile(tally.e2e_s, 0.5) * 1e3:.1f} ms"
            f" (lone-sequence decode in the model: {model_e2e * 1e3:.1f} ms)"
        )
    print(f"engine-side TTFT mean={tally.engine_ttft_s * 1e3:.1f} ms (queue, prefill, loop lag)")


def main(argv: Sequence[str] | None = None) -> int:
    cli = argparse.ArgumentParser(prog="python -m loadtest.sim_engine.bench")
    cli.add_argument("--count", type=int, default=8)
    cli.add_argument("--rate", type=float, default=40.0, help="requests per second, all engines")
    cli.add_argument("--seconds", type=float, default=15.0)
    cli.add_argument("--tokens", type=int, default=64, help="max_tokens of each request")
    cli.add_argument("--time-scale", type=float, default=0.05)
    cli.add_argument("--quick", action="store_true", help="3 seconds")
    args = cli.parse_args(argv)
    if args.quick:
        args.seconds = 3.0
    process, urls = start_engines(args)
    try:
        cpu_before, client_before = cpu_seconds(process.pid), time.process_time()
        tally, wall_s = uvloop.run(drive(args, urls))
        cpu_s = cpu_seconds(process.pid) - cpu_before
        client_cpu_s = time.process_time() - client_before
    finally:
        process.terminate()
        process.communicate(timeout=30)
    report(args, tally, wall_s, cpu_s, client_cpu_s)
    return 0 if not tally.errors else 1


if __name__ == "__main__":
    sys.exit(main())

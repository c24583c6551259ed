"""The gateway's hop under the routing benchmark's load: Poisson arrivals, long streams.

    python -m loadtest.bench_gateway_streams [--systems kinference,sglang-router]
        [--rates 6,12,18] [--duration 10] [--rounds 2] [--max-tokens 100]
    python -m loadtest.bench_gateway_streams --in-flight 1,16 --time-scale 0.1 --max-tokens 8

`loadtest.bench_gateway` measures what a system adds to one short request at a time (or
16 in a closed loop, no generation time). The routing benchmark's vllm-64 regime sees
something else: requests arriving at random (6-18 req/s) while dozens of earlier ones
stream their replies (a chunk every 0.1 s each), so a new request's head, Pick and first
byte compete with every stream's chunks on the gateway's one event loop. This benchmark
reproduces that load on one simulated engine at real speed (64+ batch slots, the routing
benchmark's stream step), every prompt a shared prefix the engine has cached plus a
question of its own (the engine's TTFT is short and alike for every system), and measures
for each system and rate the time to the response head and to the first content chunk
(TTFT), against the engine asked directly, and the CPU of the system's processes per
request. Systems run one after another for `--duration` s of arrivals each (then their
streams drain), in rounds that rotate their order, so the shared machine's noise lands on
all of them alike.

With `--in-flight N,...` the arrivals are a closed loop instead: N streams at a time, each
followed by the next as soon as it ends, for `--duration` s per system and round (the
hop alone at 1 and at 16 in flight; a small `--time-scale` makes the engine's prefill
short, so that its jitter does not hide the hop's).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import random
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from kinference.gateway.http1 import HttpClient, UpstreamError
from loadtest import gateway_systems as systems
from loadtest.gateway_systems import MODEL, System, cpu_seconds
from loadtest.servers import ServerSpec

DEFAULT_SYSTEMS = ("kinference", "sglang-router")
_CONTENT = b'"content":"'


@dataclass
class Slice:
    """One system at one rate, over all rounds: seconds from each request's start."""

    heads: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    failed: int = 0
    chunks: int = 0  # body reads of the client's, over the requests that succeeded

    def pct(self, values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(int(len(ordered) * q), len(ordered) - 1)] * 1000 if ordered else 0.0

    @property
    def reads(self) -> float:
        return self.chunks / len(self.ttfts) if self.ttfts else 0.0

    @property
    def cpu_ms(self) -> float:
        return self.cpu_s * 1000 / len(self.ttfts) if self.ttfts else 0.0


def prompt_body(shared: str, index: int, max_tokens: int) -> bytes:
    """A streamed chat: the shared prefix (cached) and a question of its own."""
    question = f"Question {index}: what does note {index * 7919 % 10007} say? " * 4
    request = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": shared},
            {"role": "user", "content": question},
        ],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return json.dumps(request).encode()


def _has_content(chunk: bytes) -> bool:
    at = chunk.find(_CONTENT)
    while at >= 0:
        if chunk[at + len(_CONTENT) : at + len(_CONTENT) + 1] not in (b'"', b""):
            return True
        at = chunk.find(_CONTENT, at + 1)
    return False


async def one_stream(client: HttpClient, url: str, body: bytes, into: Slice) -> None:
    headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
    started = time.perf_counter()
    try:
        response = await client.request("POST", url, headers, _single(body))
    except UpstreamError:  # counted, the run goes on
        into.failed += 1
        return
    head = time.perf_counter() - started
    ttft = 0.0
    reads = 0
    try:
        async for chunk in response.chunks():
            reads += 1
            if not ttft and _has_content(chunk):
                ttft = time.perf_counter() - started
    except UpstreamError:
        ttft = 0.0
    finally:
        response.close()
    if response.status != 200 or not ttft:
        into.failed += 1
        return
    into.heads.append(head)
    into.ttfts.append(ttft)
    into.chunks += reads


async def _single(body: bytes) -> AsyncIterator[bytes]:
    yield body


async def poisson(client: HttpClient, system: System, rate: float, args: argparse.Namespace,
                  into: Slice) -> None:  # fmt: skip
    """`rate` requests/s for `args.duration` s, each stream read to its end."""
    rng = random.Random(args.seed)
    url = f"{system.url}/v1/chat/completions"
    tasks: list[asyncio.Task[None]] = []
    cpu_before = sum(cpu_seconds(pid) for pid in system.pids)
    start = time.perf_counter()
    due = 0.0
    while due < args.duration:
        wait = start + due - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        args.sent += 1  # every question new to the engine: the same prefill for every system
        body = prompt_body(args.shared, args.seed * 1_000_000 + args.sent, args.max_tokens)
        tasks.append(asyncio.create_task(one_stream(client, url, body, into)))
        due += rng.expovariate(rate)
    await asyncio.gather(*tasks)
    into.cpu_s += sum(cpu_seconds(pid) for pid in system.pids) - cpu_before


async def closed(client: HttpClient, system: System, streams: int, args: argparse.Namespace,
                 into: Slice) -> None:  # fmt: skip
    """`streams` at a time for `args.duration` s, each followed by the next when it ends."""
    url = f"{system.url}/v1/chat/completions"
    cpu_before = sum(cpu_seconds(pid) for pid in system.pids)
    end = time.perf_counter() + args.duration

    async def worker() -> None:
        while time.perf_counter() < end:
            args.sent += 1
            body = prompt_body(args.shared, args.seed * 1_000_000 + args.sent, args.max_tokens)
            await one_stream(client, url, body, into)

    await asyncio.gather(*(worker() for _ in range(streams)))
    into.cpu_s += sum(cpu_seconds(pid) for pid in system.pids) - cpu_before


def started(
    names: list[str], log_dir: Path, seqs: int, time_scale: float = 1.0, step_s: float = 0.1
) -> contextlib.AbstractAsyncContextManager[list[System]]:
    """The engine (first) and every system named that can run here."""

    def engine_argv(listen: str) -> list[str]:
        port = listen.rpartition(":")[2]
        return [sys.executable, "-m", "loadtest.sim_engine", "--port", port, "--time-scale",
                str(time_scale), "--max-num-seqs", str(seqs),
                "--stream-step-s", str(step_s)]  # fmt: skip

    spec = ServerSpec("sim-engine", engine_argv)
    return systems.started(spec, names, log_dir, prompt_body("ready?", 0, 1))


async def run(args: argparse.Namespace) -> dict[tuple[str, float], Slice]:
    results: dict[tuple[str, float], Slice] = defaultdict(Slice)
    with tempfile.TemporaryDirectory(prefix="bench-streams-") as tmp:
        up_args = (args.max_num_seqs, args.time_scale, args.stream_step_s)
        async with started(args.systems, Path(tmp), *up_args) as up:
            client = HttpClient(connect_timeout_s=10, read_timeout_s=60)
            for system in up:  # warm every path; the engine caches the shared prefix
                await poisson(client, system, 10.0, _warm(args), Slice())
            gc.collect()
            gc.freeze()
            for round_no in range(args.rounds):
                for rate in args.in_flight or args.rates:
                    for system in up[round_no % len(up) :] + up[: round_no % len(up)]:
                        into = results[system.name, rate]
                        if args.in_flight:
                            await closed(client, system, int(rate), args, into)
                        else:
                            await poisson(client, system, rate, args, into)
                print(f"round {round_no + 1}/{args.rounds} done", file=sys.stderr)
            await client.aclose()
    return results


def _warm(args: argparse.Namespace) -> argparse.Namespace:
    warm = argparse.Namespace(**{**vars(args), "duration": 1.0})
    args.sent += 100
    return warm


def table(results: dict[tuple[str, float], Slice]) -> list[str]:
    names = list(dict.fromkeys(key[0] for key in results))
    rates = sorted({key[1] for key in results})
    lines = [
        "| system | req/s or in flight | TTFT p50 | p90 | p99 | added p50 | p90 | p99 | "
        "head p50 | p99 | CPU ms/req | reads/req | requests (failed) |",
        "| --- " + "| ---: " * 12 + "|",
    ]
    for rate in rates:
        direct = results[names[0], rate]
        for name in names:
            one = results[name, rate]
            cells = [f"{one.pct(one.ttfts, q):.1f}" for q in (0.5, 0.9, 0.99)]
            added = [
                "" if name == names[0] else
                f"{one.pct(one.ttfts, q) - direct.pct(direct.ttfts, q):.1f}"
                for q in (0.5, 0.9, 0.99)
            ]  # fmt: skip
            heads = [f"{one.pct(one.heads, q):.1f}" for q in (0.5, 0.99)]
            lines.append(
                f"| {name} | {rate:g} | {' | '.join(cells)} | {' | '.join(added)} | "
                f"{' | '.join(heads)} | {one.cpu_ms:.2f} | {one.reads:.1f} | "
                f"{len(one.ttfts)} ({one.failed}) |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS), help="comma-separated")
    cli.add_argument("--rates", default="6,12,18", help="requests/s, comma-separated")
    cli.add_argument("--duration", type=float, default=10.0, help="s of arrivals per slice")
    cli.add_argument("--rounds", type=int, default=2)
    cli.add_argument("--max-tokens", type=int, default=100, help="reply length, tokens")
    cli.add_argument("--prompt-bytes", type=int, default=6000, help="the shared prefix")
    cli.add_argument("--max-num-seqs", type=int, default=128, help="the engine's batch slots")
    cli.add_argument("--seed", type=int, default=1)
    cli.add_argument(
        "--in-flight", default="", help="closed loops of N streams, comma-separated (not --rates)"
    )
    cli.add_argument("--time-scale", type=float, default=1.0, help="the engine's, see sim_engine")
    cli.add_argument(
        "--stream-step-s", type=float, default=0.1,
        help="the engine's: tokens due within this go out in one chunk (0.001: one a token)",
    )  # fmt: skip
    args = cli.parse_args(argv)
    args.in_flight = [float(n) for n in args.in_flight.split(",") if n]
    args.systems = [name for name in args.systems.split(",") if name]
    args.sent = 0
    args.rates = [float(rate) for rate in args.rates.split(",") if rate]
    notes = "You answer questions about these notes. lorem ipsum dolor sit amet "
    args.shared = (notes * (args.prompt_bytes // len(notes) + 1))[: args.prompt_bytes]
    results = asyncio.run(run(args))
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

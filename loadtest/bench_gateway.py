"""What a front door adds: kinference's gateway beside LiteLLM, vllm-router and sglang-router.

    python -m loadtest.bench_gateway [--rounds 3] [--quick] [--systems kinference,litellm,...]
        [--prompt-bytes 49152]

One simulated engine answering at once (`--time-scale 0`: what is measured is the serving
path, not generation) and, in front of it, each system with its project's defaults:
kinference's gateway hosting the picker (`kinference gateway`, the default deployment),
kinference's gateway calling a separate `kinference serve` (`--picker`, remote mode),
LiteLLM's proxy, vllm-router and sglang-router. The same 16-token chat completions, whole
and streamed, go straight to the engine and through each system, at 1 and 16 in flight, in
rounds that interleave the systems: at 1 in flight in blocks of `--block` requests cycling
through every system, so that a noisy neighbour on the shared machine hurts all of them
alike (the p99 there is the tail of a few hundred requests per system and round); the
client's own garbage collector is off while measuring. Printed: latency percentiles and
what each system adds to the engine's own, the distribution at 1 in flight, CPU per request
of the system's processes, throughput, and kinference's targets (issue 14) as PASS/FAIL.
Peers that are not installed are skipped (`pip install '.[bench]' litellm[proxy]`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from kinference.gateway.http1 import HttpClient
from loadtest import gateway_systems as systems
from loadtest.gateway_systems import MODEL, System, cpu_seconds, post_drained
from loadtest.servers import ServerSpec

KINDS = ("whole", "streamed")
ALL_SYSTEMS = ("kinference", "kinference-remote", "litellm", "vllm-router", "sglang-router")
# Issue 14's targets for kinference.
ADDED_P50_MS, ADDED_P99_MS, CPU_MS, VS_LITELLM, VS_VLLM = 1.5, 4.0, 1.5, 5.0, 0.3


def chat_body(stream: bool, max_tokens: int, prompt_bytes: int = 0) -> bytes:
    """A chat request; its prompt ~1 KiB, or `prompt_bytes` of notes (a long document)."""
    notes = "lorem ipsum dolor sit amet "
    repeats = max(prompt_bytes // len(notes), 1) if prompt_bytes else 40
    prompt = "Summarise the following notes. " + notes * repeats
    request = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    return json.dumps(request).encode()


@dataclass
class Slice:
    """Everything measured for one system, kind and concurrency, over all rounds."""

    latencies: list[float] = field(default_factory=list)  # seconds
    seconds: float = 0.0
    cpu_s: float = 0.0

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(int(len(ordered) * q), len(ordered) - 1)] * 1000

    @property
    def per_s(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0

    @property
    def cpu_ms(self) -> float:
        return self.cpu_s * 1000 / len(self.latencies) if self.latencies else 0.0


async def _one(client: HttpClient, url: str, body: bytes) -> float:
    started = time.perf_counter()
    status = await post_drained(client, url, body)
    if status != 200:
        raise RuntimeError(f"{url} answered {status}")
    return time.perf_counter() - started


async def measure(
    client: HttpClient, system: System, body: bytes, load: tuple[int, int], into: Slice
) -> None:
    """`load` = (requests, concurrency); adds latencies, wall and CPU time to `into`."""
    requests, concurrency = load
    url = f"{system.url}/v1/chat/completions"
    remaining = iter(range(requests))
    latencies: list[float] = []

    async def worker() -> None:
        for _ in remaining:
            latencies.append(await _one(client, url, body))

    cpu_before = sum(cpu_seconds(pid) for pid in system.pids)
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    into.seconds += time.perf_counter() - started
    into.cpu_s += sum(cpu_seconds(pid) for pid in system.pids) - cpu_before
    into.latencies.extend(latencies)


def started(
    names: list[str], log_dir: Path
) -> contextlib.AbstractAsyncContextManager[list[System]]:
    """The engine (first) and every system named that can run here."""
    return systems.started(
        ServerSpec("sim-engine", _engine_argv), names, log_dir, chat_body(False, 1)
    )


async def _one_in_flight(
    client: HttpClient,
    up: list[System],
    body: bytes,
    args: argparse.Namespace,
    *,
    at: tuple[int, str],
    results: dict[tuple[str, str, int], Slice],
) -> None:
    """A round's requests at 1 in flight, in blocks of `args.block` that cycle through the
    systems (the order rotating each cycle): a noisy neighbour's burst on the shared machine
    lands on every system alike, engine included, instead of on one system's whole slice."""
    round_no, kind = at
    blocks = max(args.requests_1 // args.block, 1)
    for cycle in range(blocks):
        for system in _rotated(up, round_no * blocks + cycle):
            load = (args.block, 1)
            await measure(client, system, body, load, results[system.name, kind, 1])


def _rotated(up: list[System], by: int) -> list[System]:
    shift = by % len(up)
    return up[shift:] + up[:shift]


def _engine_argv(listen: str) -> list[str]:
    port = listen.rpartition(":")[2]
    return [sys.executable, "-m", "loadtest.sim_engine", "--port", port, "--time-scale", "0"]


async def run(args: argparse.Namespace) -> dict[tuple[str, str, int], Slice]:
    results: dict[tuple[str, str, int], Slice] = defaultdict(Slice)
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        async with started(args.systems, Path(tmp)) as up:
            client = HttpClient(connect_timeout_s=10, read_timeout_s=60)
            bodies = {
                kind: chat_body(kind == "streamed", args.max_tokens, args.prompt_bytes)
                for kind in KINDS
            }
            for system in up:  # warm every path (connections, caches, JITs of the peers)
                await measure(client, system, bodies["whole"], (64, 16), Slice())
            # The client's own collector stays out of every measurement (it would add its
            # pauses to whichever system it happened to be measuring).
            gc.collect()
            gc.freeze()
            gc.disable()
            for round_no in range(args.rounds):
                for kind in KINDS:
                    await _one_in_flight(
                        client, up, bodies[kind], args, at=(round_no, kind), results=results
                    )
                    order = _rotated(up, round_no)
                    for system in order:
                        key = (system.name, kind, 16)
                        load = (args.requests_16, 16)
                        await measure(client, system, bodies[kind], load, results[key])
                gc.collect()  # between rounds, outside any measurement
                print(f"round {round_no + 1}/{args.rounds} done", file=sys.stderr)
            gc.enable()
            await client.aclose()
            names = [system.name for system in up]
    return {key: results[key] for name in names for key in results if key[0] == name}


def table(results: dict[tuple[str, str, int], Slice]) -> list[str]:
    names = list(dict.fromkeys(key[0] for key in results))
    base = names[0]
    lines = [
        "| system | kind | p50 ms @1 | p99 ms @1 | added p50 | added p99 | CPU ms/req @1 | "
        "CPU ms/req @16 | req/s @16 |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in names:
        for kind in KINDS:
            one, many, direct = (
                results[name, kind, 1],
                results[name, kind, 16],
                results[base, kind, 1],
            )
            added = "" if name == base else f"{one.pct(0.5) - direct.pct(0.5):.2f}"
            added99 = "" if name == base else f"{one.pct(0.99) - direct.pct(0.99):.2f}"
            lines.append(
                f"| {name} | {kind} | {one.pct(0.5):.2f} | {one.pct(0.99):.2f} | {added} | "
                f"{added99} | {one.cpu_ms:.2f} | {many.cpu_ms:.2f} | {many.per_s:.0f} |"
            )
    return lines


def tails(results: dict[tuple[str, str, int], Slice]) -> list[str]:
    """The latency distribution at 1 in flight, where the p99 target is judged."""
    lines = [
        "| system | kind | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | requests |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in dict.fromkeys(key[0] for key in results):
        for kind in KINDS:
            one = results[name, kind, 1]
            cells = " | ".join(f"{one.pct(q):.2f}" for q in (0.5, 0.9, 0.99, 0.999, 1.0))
            lines.append(f"| {name} | {kind} | {cells} | {len(one.latencies)} |")
    return lines


def verdicts(results: dict[tuple[str, str, int], Slice], name: str) -> list[str]:
    """Issue 14's targets for one kinference mode, each PASS or FAIL."""
    names = list(dict.fromkeys(key[0] for key in results))
    if name not in names:
        return []
    base, out = names[0], []
    for kind in KINDS:
        one, direct = results[name, kind, 1], results[base, kind, 1]
        added50 = one.pct(0.5) - direct.pct(0.5)
        added99 = one.pct(0.99) - direct.pct(0.99)
        out.append(
            _verdict(
                f"{name} {kind}: added p50 {added50:.2f} ms <= {ADDED_P50_MS}",
                added50 <= ADDED_P50_MS,
            )
        )
        out.append(
            _verdict(
                f"{name} {kind}: added p99 {added99:.2f} ms <= {ADDED_P99_MS}",
                added99 <= ADDED_P99_MS,
            )
        )
        cpu = max(results[name, kind, 1].cpu_ms, results[name, kind, 16].cpu_ms)
        out.append(_verdict(f"{name} {kind}: CPU {cpu:.2f} ms/req <= {CPU_MS}", cpu <= CPU_MS))
        ours = results[name, kind, 16].per_s
        for peer, factor in (("litellm", VS_LITELLM), ("vllm-router", VS_VLLM)):
            if peer in names:
                theirs = results[peer, kind, 16].per_s
                ratio = ours / theirs if theirs else 0.0
                out.append(
                    _verdict(
                        f"{name} {kind}: {ratio:.2f}x {peer}'s req/s @16 >= {factor}x",
                        ratio >= factor,
                    )
                )
    return out  # fmt: skip


def _verdict(text: str, ok: bool) -> str:
    return f"{'PASS' if ok else 'FAIL'}  {text}"


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    cli.add_argument("--requests-1", type=int, default=300, help="per round and case, 1 in flight")
    cli.add_argument(
        "--requests-16", type=int, default=1200, help="per round and case, 16 in flight"
    )
    cli.add_argument(
        "--block", type=int, default=20, help="1 in flight: requests per system before the next"
    )
    cli.add_argument("--max-tokens", type=int, default=16)
    cli.add_argument("--prompt-bytes", type=int, default=0, help="a long prompt (default: ~1 KiB)")
    cli.add_argument("--systems", default=",".join(ALL_SYSTEMS), help="comma-separated")
    cli.add_argument("--quick", action="store_true", help="1 round, 60 / 240 requests")
    args = cli.parse_args(argv)
    args.systems = [name for name in args.systems.split(",") if name]
    if args.quick:
        args.rounds, args.requests_1, args.requests_16 = 1, 60, 240
    results = asyncio.run(run(args))
    print("\n".join(table(results)))
    print()
    print("\n".join(tails(results)))
    print()
    for name in ("kinference", "kinference remote"):
        for line in verdicts(results, name):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

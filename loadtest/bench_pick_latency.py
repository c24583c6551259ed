"""Pick latency against pool size and body size: 8, 64 and 512 workers, 4 KiB and 1 MiB bodies.

    python -m loadtest.bench_pick_latency [--quick] [--workers 8,64,512] [--sizes 4096,1048576]

One `python -m kinference serve` subprocess per worker count (a policy with one pool of that
many static endpoints, `engine: none`), started with `loadtest.servers`. Bodies are
realistic chat requests sharing a system prompt (`loadtest.pick_bodies`), so the prefix
index fills and is matched on every Pick.

Per configuration, over one channel: a batch of bodies is pushed first, then their Picks
are sent one at a time (sequential, so no Pick queues behind another) and each Pick RPC is
timed on the client; the picked requests are then released with Abort before the next
batch. Reported per configuration:

- client p50 / p99: the Pick RPC as a caller sees it (server time plus one loopback
  round trip through grpc.aio on both sides);
- server mean: the server's own `kinference_pick_duration_seconds` histogram, sum and count
  read from its /metrics before and after the measured Picks (warm-up excluded).

The check: the 512-worker p50 stays within 2x the 8-worker p50, per body size (client p50;
the server-mean ratio is printed alongside, as information).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import uvloop

from kinference.v1 import picker_pb2, picker_pb2_grpc
from loadtest.flows import ACCEPTED_OUTCOMES, Body, open_channel
from loadtest.pick_bodies import MODEL, BodyFactory
from loadtest.servers import ServerSpec, free_port, running

KIB = 1024
MIB = 1024 * KIB
PICK_HISTOGRAM = "kinference_pick_duration_seconds"
MAX_RATIO = 2.0


@dataclass(frozen=True)
class Plan:
    """How many Picks per body size, in batches of pushed bodies."""

    label: str
    workers: tuple[int, ...]
    sizes: tuple[int, ...]
    picks: dict[int, int]  # body size -> measured picks
    warmup: dict[int, int]  # body size -> unmeasured picks first
    batch: dict[int, int]  # body size -> bodies pushed before their picks
    rounds: int  # passes over the worker counts, alternating order (drift cancels out)


def plan_from(args: argparse.Namespace) -> Plan:
    workers = tuple(int(w) for w in args.workers.split(","))
    sizes = tuple(int(s) for s in args.sizes.split(","))

    def per_size(small: int, large: int) -> dict[int, int]:
        return {size: small if size <= 64 * KIB else large for size in sizes}

    if args.quick:
        return Plan(
            "quick", workers, sizes, per_size(400, 60), per_size(50, 8), per_size(100, 20), 1
        )
    return Plan(
        "full", workers, sizes, per_size(1500, 200), per_size(200, 20), per_size(250, 25), 2
    )


@dataclass
class Result:
    workers: int
    size: int
    body_bytes: int
    latencies_s: list[float]
    server_sum_s: float
    server_count: float

    @property
    def server_mean_s(self) -> float:
        return self.server_sum_s / self.server_count

    def add(self, other: Result) -> None:
        self.latencies_s += other.latencies_s
        self.server_sum_s += other.server_sum_s
        self.server_count += other.server_count

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        return ordered[min(int(q * len(ordered)), len(ordered) - 1)]

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies_s)

    @property
    def p99(self) -> float:
        return self.quantile(0.99)


def policy_yaml(workers: int) -> str:
    endpoints = ", ".join(f'"10.{i // 250 + 1}.{i % 250}.{1 + i % 7}:8000"' for i in range(workers))
    return (
        "pools:\n"
        "  - namespace: default\n"
        "    name: chat\n"
        "    engine: none\n"
        f'    models: ["{MODEL}"]\n'
        f"    endpoints: [{endpoints}]\n"
    )


def server_spec(config: Path, metrics_port: int) -> ServerSpec:
    return ServerSpec(
        "kinference",
        lambda listen: [
            *(sys.executable, "-m", "kinference", "serve"),
            *("--listen", listen, "--config", str(config)),
        ],
        env={"KINFERENCE_METRICS_LISTEN": f"127.0.0.1:{metrics_port}"},
    )


async def histogram(client: httpx.AsyncClient, url: str) -> tuple[float, float]:
    """(sum, count) of the server's Pick duration histogram."""
    text = (await client.get(url)).text
    values: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in (f"{PICK_HISTOGRAM}_sum", f"{PICK_HISTOGRAM}_count"):
            values[name] = float(value)
    return values[f"{PICK_HISTOGRAM}_sum"], values[f"{PICK_HISTOGRAM}_count"]


class Runner:
    """Pushes, picks and releases over one stub."""

    def __init__(self, stub: picker_pb2_grpc.PickerStub) -> None:
        self.stub = stub

    async def push(self, body: Body) -> int:
        metadata = (("kinference-declared-length", str(body.length)),)
        reply = await self.stub.PushBody(body.messages(), metadata=metadata)
        return int(reply.stream_id)

    async def push_batch(self, bodies: Sequence[Body], parallel: int = 8) -> list[int]:
        ids: list[int] = []
        for start in range(0, len(bodies), parallel):
            group = bodies[start : start + parallel]
            ids += await asyncio.gather(*(self.push(body) for body in group))
        return ids

    async def timed_picks(self, stream_ids: Sequence[int]) -> tuple[list[float], list[int]]:
        latencies, response_ids = [], []
        for stream_id in stream_ids:
            request = picker_pb2.PickRequest(body_stream_id=stream_id, tenant="bench")
            started = time.perf_counter()
            reply = await self.stub.Pick(request)
            latencies.append(time.perf_counter() - started)
            if reply.outcome not in ACCEPTED_OUTCOMES:
                name = picker_pb2.PickResponse.Outcome.Name(reply.outcome)
                raise RuntimeError(f"Pick answered {name}: {reply.reason}")
            response_ids.append(int(reply.response_id))
        return latencies, response_ids

    async def release(self, response_ids: Sequence[int]) -> None:
        reason = picker_pb2.AbortRequest.NOT_DISPATCHED
        await asyncio.gather(
            *(
                self.stub.Abort(picker_pb2.AbortRequest(response_id=rid, reason=reason))
                for rid in response_ids
            )
        )

    async def rounds(self, factory: BodyFactory, first: int, picks: int, batch: int) -> list[float]:
        latencies: list[float] = []
        index = first
        while len(latencies) < picks:
            count = min(batch, picks - len(latencies))
            ids = await self.push_batch([factory.body(index + i) for i in range(count)])
            index += count
            measured, response_ids = await self.timed_picks(ids)
            latencies += measured
            await self.release(response_ids)
        return latencies


async def measure_size(
    runner: Runner, http: httpx.AsyncClient, metrics_url: str, plan: Plan, size: int
) -> tuple[list[float], float, float]:
    """Client latencies, and the server's (sum, count) of the measured Picks."""
    factory = BodyFactory(size)
    await runner.rounds(factory, 0, plan.warmup[size], plan.batch[size])
    before = await histogram(http, metrics_url)
    latencies = await runner.rounds(factory, 10**6, plan.picks[size], plan.batch[size])
    after = await histogram(http, metrics_url)
    count = after[1] - before[1]
    if count != len(latencies):
        raise RuntimeError(f"server counted {count:g} picks, client made {len(latencies)}")
    return latencies, after[0] - before[0], count


async def measure_workers(plan: Plan, workers: int, work: Path) -> list[Result]:
    config = work / f"policy-{workers}.yaml"
    config.write_text(policy_yaml(workers))
    metrics_port = free_port()
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    results = []
    async with (
        running(server_spec(config, metrics_port), work) as server,
        open_channel(server.address) as channel,
        httpx.AsyncClient(trust_env=False) as http,
    ):
        runner = Runner(picker_pb2_grpc.PickerStub(channel))
        for size in plan.sizes:
            log(f"{workers} workers, {human(size)} bodies ...")
            latencies, server_sum, count = await measure_size(runner, http, metrics_url, plan, size)
            body_bytes = BodyFactory(size).body(0).length
            results.append(Result(workers, size, body_bytes, latencies, server_sum, count))
            server.check_alive()
    return results


def human(size: int) -> str:
    return f"{size // MIB} MiB" if size >= MIB else f"{size // KIB} KiB"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def render(plan: Plan, results: list[Result], elapsed_s: float) -> tuple[str, bool]:
    rounds = f"{plan.rounds} round{'s' if plan.rounds > 1 else ''}"
    lines = [
        f"### Pick latency ({plan.label} run, {rounds}, {elapsed_s:.0f} s)",
        "",
        "| workers | body | bytes | picks | client p50 ms | client p99 ms | server mean ms |",
        "|--:|---|--:|--:|--:|--:|--:|",
    ]
    for r in results:
        lines.append(
            f"| {r.workers} | {human(r.size)} | {r.body_bytes} | {len(r.latencies_s)} "
            f"| {ms(r.p50)} | {ms(r.p99)} | {ms(r.server_mean_s)} |"
        )
    lines += ["", "| check | 8 workers | 512 workers | ratio | server-mean ratio | result |"]
    lines.append("|---|--:|--:|--:|--:|---|")
    by_key = {(r.workers, r.size): r for r in results}
    passed = True
    low, high = min(plan.workers), max(plan.workers)
    for size in plan.sizes:
        small, large = by_key.get((low, size)), by_key.get((high, size))
        if small is None or large is None or low == high:
            continue
        ratio = large.p50 / small.p50
        server_ratio = large.server_mean_s / small.server_mean_s
        ok = ratio <= MAX_RATIO
        passed &= ok
        lines.append(
            f"| {human(size)}: {high}-worker p50 <= {MAX_RATIO:g} x {low}-worker p50 "
            f"| {ms(small.p50)} | {ms(large.p50)} | {ratio:.2f} | {server_ratio:.2f} "
            f"| {'PASS' if ok else 'FAIL'} |"
        )
    return "\n".join(lines), passed


async def main_async(plan: Plan) -> int:
    started = time.perf_counter()
    merged: dict[tuple[int, int], Result] = {}
    with tempfile.TemporaryDirectory(prefix="bench-pick-") as tmp:
        for round_index in range(plan.rounds):
            order = plan.workers if round_index % 2 == 0 else plan.workers[::-1]
            for workers in order:
                for result in await measure_workers(plan, workers, Path(tmp)):
                    key = (result.workers, result.size)
                    if key in merged:
                        merged[key].add(result)
                    else:
                        merged[key] = result
    results = [merged[key] for key in sorted(merged)]
    table, passed = render(plan, results, time.perf_counter() - started)
    print(table)
    return 0 if passed else 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="finish in under a minute")
    parser.add_argument("--workers", default="8,64,512", help="comma-separated pool sizes")
    parser.add_argument("--sizes", default=f"{4 * KIB},{MIB}", help="comma-separated bytes")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    plan = plan_from(parse_args(argv))
    try:
        return uvloop.run(main_async(plan))
    except grpc.aio.AioRpcError as error:
        log(f"RPC failed: {error.code().name}: {error.details()}")
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""A replica's fixed CPU: `kinference gateway` replicas idle and at a trickle, with Redis.

    python -m loadtest.bench_idle_cpu [--replicas 1 4] [--window 30] [--rate 1] [--repeat 1]

4 simulated engines (`loadtest.routing_bench.engine_host`, scraped as vLLM), one real
redis-server on a free port, and N gateways sharing it (the routing benchmark's shipped
defaults). For each N: an idle window (no requests), then a window of `--rate` chat
requests a second spread round-robin over the gateways. CPU is utime + stime from
/proc/<pid>/stat over each window, printed as CPU seconds per minute for each gateway (mean
over the N) and for the redis-server. One JSON line per window for scripts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import itertools
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import redis
import uvloop

from loadtest.gateway_systems import cpu_seconds, wait_http
from loadtest.redis_server import RedisServer
from loadtest.routing_bench.engines import EngineSetup, engines_running
from loadtest.routing_bench.fleets import Engines as FleetEngines
from loadtest.routing_bench.replicas import _processes, gateway_spec, policy_yaml
from loadtest.routing_bench.workload import MODEL

SETTLE_S = 3.0  # seconds after the gateways answer before a window opens


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--replicas", type=int, nargs="+", default=[1, 4])
    cli.add_argument("--window", type=float, default=30.0, help="seconds per window")
    cli.add_argument("--rate", type=float, default=1.0, help="requests a second, trickle")
    cli.add_argument("--repeat", type=int, default=1)
    cli.add_argument("--label", default=os.environ.get("BENCH_LABEL", ""))
    cli.add_argument("--standalone", action="store_true", help="no Redis for the gateways")
    cli.add_argument("--profile", default="", help="path prefix: gateways run under cProfile")
    return cli.parse_args(argv)


async def trickle(addresses: list[str], rate: float, until: float) -> int:
    """Chat requests at `rate` a second until `until` (monotonic); returns how many."""
    targets, sent = itertools.cycle(addresses), 0
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello " * 40}]}
    async with httpx.AsyncClient(trust_env=False, timeout=30.0) as http:
        tasks: list[asyncio.Task[httpx.Response]] = []
        while (now := time.monotonic()) < until:
            payload = {**body, "max_tokens": 16, "stream": False}
            tasks.append(
                asyncio.create_task(
                    http.post(f"http://{next(targets)}/v1/chat/completions", json=payload)
                )
            )
            sent += 1
            await asyncio.sleep(max(0.0, 1.0 / rate - (time.monotonic() - now)))
        for reply in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(reply, BaseException) or reply.status_code != 200:
                raise RuntimeError(f"trickle request failed: {reply!r}")
    return sent


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def command_calls(port: int) -> dict[str, int]:
    """Redis calls by command so far (INFO commandstats), INFO itself left out."""
    with redis.Redis(port=port) as client:
        stats = client.info("commandstats")
    return {
        k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info"
    }


async def window(
    pids: list[int], server: RedisServer, seconds: float, load: object
) -> dict[str, object]:
    redis_pid = server._process.pid  # type: ignore[union-attr]
    calls = command_calls(server.port)
    before = [cpu_seconds(pid) for pid in pids]
    redis_before = cpu_seconds(redis_pid)
    started = time.monotonic()
    if callable(load):
        await load(started + seconds)
    else:
        await asyncio.sleep(seconds)
    elapsed = time.monotonic() - started
    after = command_calls(server.port)
    rates = {k: round((v - calls.get(k, 0)) / elapsed, 1) for k, v in after.items()}
    per_min = [(cpu_seconds(pid) - b) * 60 / elapsed for pid, b in zip(pids, before, strict=True)]
    return {
        "gateway_cpu_s_per_min": sum(per_min) / len(per_min),
        "gateways_total_cpu_s_per_min": sum(per_min),
        "each": [round(x, 2) for x in per_min],
        "redis_cpu_s_per_min": (cpu_seconds(redis_pid) - redis_before) * 60 / elapsed,
        "seconds": elapsed,
        "redis_calls_per_s": {k: v for k, v in sorted(rates.items(), key=lambda kv: -kv[1]) if v},
    }


@contextlib.asynccontextmanager
async def cluster(
    count: int,
    engines: FleetEngines,
    server: RedisServer,
    log_dir: Path,
    *,
    profile: str,
    standalone: bool = False,
) -> AsyncIterator[tuple[list[str], list[int]]]:
    with redis.Redis(port=server.port) as client:
        client.flushall()
    policy = log_dir / "policy.yaml"
    policy.write_text(policy_yaml(engines, {}))
    spec = gateway_spec(policy, "" if standalone else server.url)
    if profile:
        spec = dataclasses.replace(
            spec,
            argv=lambda listen: [
                arg if arg != "kinference" else "loadtest.profiled"
                for arg in gateway_spec(policy, spec.env["KINFERENCE_REDIS_URL"]).argv(listen)
            ],
            env={**spec.env, "KINFERENCE_PROFILE_OUT": profile},
        )
    specs = [dataclasses.replace(spec, label=f"gateway-r{i}") for i in range(count)]
    with _processes(specs, log_dir) as servers:
        for gateway in servers:
            await wait_http(gateway, f"http://{gateway.address}/health")
        await asyncio.sleep(SETTLE_S)
        yield [gateway.address for gateway in servers], [gateway.pid for gateway in servers]


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as work:
        log_dir = Path(work)
        server = RedisServer().start()
        try:
            async with engines_running(EngineSetup(count=4), log_dir) as fleet:
                metrics = [f"{url}/metrics" for url in fleet.urls]
                engines = FleetEngines(fleet.urls, metrics, {})
                for _ in range(args.repeat):
                    for count in args.replicas:
                        options = {"profile": args.profile, "standalone": args.standalone}
                        running = cluster(count, engines, server, log_dir, **options)
                        async with running as (addresses, pids):
                            idle = await window(pids, server, args.window, None)
                            load = lambda until: trickle(addresses, args.rate, until)  # noqa: E731
                            busy = await window(pids, server, args.window, load)
                        for name, row in (("idle", idle), (f"{args.rate:g} req/s", busy)):
                            print(
                                json.dumps(
                                    {
                                        "label": args.label
                                        + (" standalone" if args.standalone else ""),
                                        "replicas": count,
                                        "window": name,
                                        **{
                                            k: round(v, 3) if isinstance(v, float) else v
                                            for k, v in row.items()
                                        },
                                        "loadavg": loadavg(),
                                    }
                                ),
                                flush=True,
                            )
        finally:
            server.kill()


def main(argv: list[str] | None = None) -> int:
    uvloop.run(run(parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The routers under test and how each is started in front of the engines.

kinference replicas run as `kinference serve` subprocesses (like `loadtest.bench_cluster`):
each has its own event loop and process, as in production, and none shares the load
generator's loop. The peers are subprocesses too; round-robin and random live in the load
generator and cost nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import yaml

from loadtest.redis_server import RedisServer
from loadtest.routing_bench.drivers import DirectDriver, Driver, GatewayDriver, ProxyDriver
from loadtest.routing_bench.peers import PEERS, installed, peer_running
from loadtest.routing_bench.workload import MODEL
from loadtest.servers import ServerProcess, ServerSpec, kinference_spec, spawn, stop, wait_ready

REPLICA_ENV = {
    "KINFERENCE_METRICS_LISTEN": "",
    "KINFERENCE_SHUTDOWN_GRACE_S": "1",
    "KINFERENCE_LOG_LEVEL": "WARNING",
}
PROBE = (
    b'{"model":"' + MODEL.encode() + b'","messages":[{"role":"user","content":"ready?"}],'
    b'"max_tokens":1}'
)


@dataclass(frozen=True)
class Router:
    key: str  # as given to --routers
    label: str  # in the report
    kind: str  # "kinference", "direct" or "peer"
    replicas: int = 1
    shared: bool = False  # kinference replicas share state through Redis


ROUTERS = {
    router.key: router
    for router in (
        Router("kinference", "kinference, 1 replica", "kinference"),
        Router("kinference-4-redis", "kinference, 4 replicas + Redis", "kinference", 4, True),
        Router("kinference-4", "kinference, 4 replicas, no Redis", "kinference", 4),
        Router("round_robin", "round-robin", "direct"),
        Router("random", "random", "direct"),
        Router("sglang", "sglang-router 0.3.2 cache_aware", "peer"),
        Router("vllm", "vllm-router 0.1.17 cache_aware", "peer"),
    )
}


def available(router: Router) -> bool:
    return router.kind != "peer" or installed(PEERS[router.key])


def policy_yaml(urls: list[str], capacity_blocks: int, tuning: dict[str, Any]) -> str:
    """One pool of the engines, scraped as vLLM, the shipped routing defaults; `tuning`
    (an extra, labelled run) merged over `routing:`."""
    del capacity_blocks  # the index learns the engines' capacity from reported cached tokens
    routing: dict[str, Any] = {}
    for key, value in tuning.items():
        routing[key] = {**routing.get(key, {}), **value} if isinstance(value, dict) else value
    policy = {
        "pools": [
            {
                "namespace": "default",
                "name": "sim",
                "endpoints": [url.removeprefix("http://") for url in urls],
                "models": [MODEL],
                "engine": "vllm",
            }
        ],
        "routing": routing,
    }
    return str(yaml.safe_dump(policy, sort_keys=False))


@dataclass(frozen=True)
class Bench:
    """What every run shares: engine sizing, the policy tuning, Redis, a scratch folder."""

    capacity_blocks: int
    tuning: dict[str, Any]  # merged over the policy's `routing:` section
    log_dir: Path
    redis_server: RedisServer | None
    seed: int


@contextlib.asynccontextmanager
async def replicas(router: Router, urls: list[str], bench: Bench) -> AsyncIterator[Driver]:
    policy = bench.log_dir / "policy.yaml"
    policy.write_text(policy_yaml(urls, bench.capacity_blocks, bench.tuning))
    redis_url = ""
    if router.shared:
        assert bench.redis_server is not None
        redis_url = bench.redis_server.url
        with redis.Redis(port=bench.redis_server.port) as client:
            client.flushall()  # nothing from the previous run
    env = {**REPLICA_ENV, "KINFERENCE_REDIS_URL": redis_url}
    spec: ServerSpec = dataclasses.replace(kinference_spec(policy), env=env)
    servers: list[ServerProcess] = []
    try:
        for index in range(router.replicas):
            servers.append(
                spawn(dataclasses.replace(spec, label=f"kinference-r{index}"), bench.log_dir)
            )
        for server in servers:
            await wait_ready(server)
        driver = GatewayDriver([server.address for server in servers])
        cpu = sum(server.cpu_seconds() for server in servers)
        try:
            yield driver
        finally:
            await driver.close()
            cpu = sum(server.cpu_seconds() for server in servers) - cpu
            log(f"{router.label}: replicas used {cpu:.1f} CPU s during the run")
    except BaseException:
        for server in servers:
            print(f"\n--- {server.spec.label} ---\n{server.log_tail()}", file=sys.stderr)
        raise
    finally:
        for server in servers:  # all at once, then wait for each
            if server.process.poll() is None:
                server.process.terminate()
        for server in servers:
            stop(server)


@contextlib.asynccontextmanager
async def driving(router: Router, urls: list[str], bench: Bench) -> AsyncIterator[Driver]:
    """A driver for `router` in front of the engines at `urls`, its processes started."""
    started = time.perf_counter()
    driver: Driver
    if router.kind == "kinference":
        async with replicas(router, urls, bench) as driver:
            log(f"{router.label}: ready in {time.perf_counter() - started:.1f} s")
            yield driver
    elif router.kind == "peer":
        async with peer_running(PEERS[router.key], urls, PROBE, bench.log_dir) as peer:
            log(f"{router.label}: ready in {time.perf_counter() - started:.1f} s")
            driver = ProxyDriver(peer.url)
            try:
                yield driver
            finally:
                await driver.close()
    else:
        driver = DirectDriver(urls, router.key, bench.seed)
        try:
            yield driver
        finally:
            await driver.close()


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

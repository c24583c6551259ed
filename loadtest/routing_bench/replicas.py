"""kinference in front of the engines, as subprocesses with their own event loops.

- `gateways`: `kinference gateway` processes hosting the picker in process (the default
  deployment), N of them sharing one Redis for the scaled deployment; the load generator
  sends them plain OpenAI HTTP, round-robin, as it does a peer.
- `grpc_pickers`: `kinference serve`, the load generator acting as the gateway over gRPC
  (Push, Pick, Pull, POST, reports): the path of a custom gateway calling the picker.

Both run the shipped routing defaults: one pool of the engines, scraped as vLLM (on the
engines' own metrics port when they serve metrics apart), nothing under `routing:` unless
a labelled tuning is given.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import yaml

from loadtest.gateway_systems import wait_http
from loadtest.redis_server import RedisServer
from loadtest.routing_bench.console import log
from loadtest.routing_bench.drivers import Driver, GatewayDriver, ProxyDriver
from loadtest.routing_bench.fleets import Engines
from loadtest.routing_bench.workload import MODEL
from loadtest.servers import (
    ServerProcess,
    ServerSpec,
    free_port,
    kinference_spec,
    spawn,
    stop,
    wait_ready,
)

REPLICA_ENV = {
    "KINFERENCE_METRICS_LISTEN": "",
    "KINFERENCE_SHUTDOWN_GRACE_S": "1",
    "KINFERENCE_LOG_LEVEL": "WARNING",
    "KINFERENCE_GATEWAY_LOG_LEVEL": "WARNING",
    "KINFERENCE_GATEWAY_SHUTDOWN_GRACE_S": "1",
    "KINFERENCE_REDIS_URL": "",  # standalone unless a run shares Redis
}


@dataclass(frozen=True)
class Bench:
    """What every run shares: the policy tuning, Redis, a scratch folder, the seed."""

    tuning: dict[str, Any]  # merged over the policy's `routing:` section
    log_dir: Path
    redis_server: RedisServer | None
    seed: int


def policy_yaml(engines: Engines, tuning: dict[str, Any], precise: bool = False) -> str:
    """One pool of the engines, scraped as vLLM, the shipped routing defaults; `tuning`
    (an extra, labelled run) merged over `routing:`; `precise`: the engines' KV events."""
    routing: dict[str, Any] = {}
    for key, value in tuning.items():
        routing[key] = {**routing.get(key, {}), **value} if isinstance(value, dict) else value
    pool: dict[str, Any] = {
        "namespace": "default",
        "name": "sim",
        "endpoints": [url.removeprefix("http://") for url in engines.urls],
        "models": [MODEL],
        "engine": "vllm",
    }
    if engines.metrics_port is not None:
        pool["metrics_port"] = engines.metrics_port
    if precise:
        if engines.precise is None:
            raise ValueError("these engines publish no KV events")
        source = engines.precise
        pool["prefix"] = {
            "mode": "precise",
            "events": source.events,
            "tokenizer": str(source.tokenizer),
            "chat_template": str(source.chat_template),
            "block_size": source.block_size,
        }
    return str(yaml.safe_dump({"pools": [pool], "routing": routing}, sort_keys=False))


def _redis_url(shared: bool, bench: Bench) -> str:
    if not shared:
        return ""
    assert bench.redis_server is not None
    with redis.Redis(port=bench.redis_server.port) as client:
        client.flushall()  # nothing from the previous run
    return bench.redis_server.url


def gateway_spec(policy: Path, redis_url: str) -> ServerSpec:
    def argv(listen: str) -> list[str]:
        return [
            *(sys.executable, "-m", "kinference", "gateway", "--listen", listen),
            *("--config", str(policy), "--grpc-listen", f"127.0.0.1:{free_port()}"),
        ]

    return ServerSpec("gateway", argv, env={**REPLICA_ENV, "KINFERENCE_REDIS_URL": redis_url})


@contextlib.contextmanager
def _processes(specs: list[ServerSpec], log_dir: Path) -> Iterator[list[ServerProcess]]:
    """Started together, stopped together; their logs printed if anything failed."""
    servers: list[ServerProcess] = []
    try:
        servers.extend(spawn(spec, log_dir) for spec in specs)
        yield servers
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
async def _measured(
    label: str, servers: list[ServerProcess], driver: Driver
) -> AsyncIterator[Driver]:
    cpu = sum(server.cpu_seconds() for server in servers)
    try:
        yield driver
    finally:
        await driver.close()
        cpu = sum(server.cpu_seconds() for server in servers) - cpu
        log(f"{label}: its processes used {cpu:.1f} CPU s during the run")


@contextlib.asynccontextmanager
async def gateways(
    count: int, shared: bool, precise: bool, engines: Engines, bench: Bench
) -> AsyncIterator[Driver]:
    """`count` gateways hosting the picker; a driver spreading requests over them."""
    policy = bench.log_dir / "policy.yaml"
    policy.write_text(policy_yaml(engines, bench.tuning, precise))
    spec = gateway_spec(policy, _redis_url(shared, bench))
    specs = [dataclasses.replace(spec, label=f"gateway-r{i}") for i in range(count)]
    with _processes(specs, bench.log_dir) as servers:
        for server in servers:
            await wait_http(server, f"http://{server.address}/health")
        driver = ProxyDriver([f"http://{server.address}" for server in servers])
        async with _measured(f"{count} gateway(s)", servers, driver):
            yield driver


@contextlib.asynccontextmanager
async def grpc_pickers(engines: Engines, bench: Bench, count: int = 1) -> AsyncIterator[Driver]:
    """`count` `kinference serve` pickers, the load generator acting as their gateway."""
    policy = bench.log_dir / "policy.yaml"
    policy.write_text(policy_yaml(engines, bench.tuning))
    spec = dataclasses.replace(kinference_spec(policy), env=REPLICA_ENV)
    specs = [dataclasses.replace(spec, label=f"kinference-r{i}") for i in range(count)]
    with _processes(specs, bench.log_dir) as servers:
        for server in servers:
            await wait_ready(server)
        driver = GatewayDriver([server.address for server in servers])
        async with _measured(f"{count} picker(s)", servers, driver):
            yield driver

"""The routers under test and how each is started in front of the engines.

kinference runs as users deploy it: `kinference gateway` processes hosting the picker in
process (the default deployment, docs/gateway.md), the load generator sending them plain
OpenAI HTTP exactly as it does the peers; 4 replicas are 4 gateways sharing one Redis,
requests spread over them round-robin as a Service would (`replicas.py`). The old row, the
load generator acting as the gateway over gRPC to a `kinference serve` process, stays as
`kinference-grpc`. The peers are subprocesses too; round-robin, random and least-in-flight
live in the load generator and cost nothing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from loadtest.routing_bench.console import log
from loadtest.routing_bench.drivers import DirectDriver, Driver, ProxyDriver
from loadtest.routing_bench.fleets import Engines, Fleet
from loadtest.routing_bench.peers import PEERS, installed, peer_running
from loadtest.routing_bench.replicas import Bench, gateways, grpc_pickers
from loadtest.routing_bench.workload import MODEL

PROBE = (
    b'{"model":"' + MODEL.encode() + b'","messages":[{"role":"user","content":"ready?"}],'
    b'"max_tokens":1}'
)


@dataclass(frozen=True)
class Router:
    key: str  # as given to --routers
    label: str  # in the report
    kind: str  # "gateway", "grpc", "direct", "peer" or "dynamo"
    replicas: int = 1
    shared: bool = False  # kinference replicas share state through Redis
    precise: bool = False  # kinference's pool in `prefix: {mode: precise}`

    @property
    def arrangement(self) -> str:
        """How the fleet arranges the engines for this router (see `Fleet.running`)."""
        return "dynamo-kv" if self.kind == "dynamo" else "endpoints"

    @property
    def ours(self) -> bool:
        return self.kind in ("gateway", "grpc")


ROUTERS = {
    router.key: router
    for router in (
        Router("kinference", "kinference, 1 replica", "gateway"),
        Router("kinference-4-redis", "kinference, 4 replicas + Redis", "gateway", 4, True),
        Router("kinference-4", "kinference, 4 replicas, no Redis", "gateway", 4),
        Router("kinference-precise", "kinference precise, 1 replica", "gateway", precise=True),
        Router("kinference-grpc", "kinference over gRPC (load generator as gateway)", "grpc"),
        Router("round_robin", "round-robin", "direct"),
        Router("random", "random", "direct"),
        Router("least_inflight", "least-in-flight", "direct"),
        Router("sglang", "sglang-router 0.3.2 cache_aware", "peer"),
        Router("vllm", "vllm-router 0.1.17 cache_aware", "peer"),
        Router("dynamo", "Dynamo 1.6.1 KV router", "dynamo"),
    )
}


def unavailable(router: Router, fleet: Fleet) -> str:
    """Why `router` cannot run in front of `fleet` ("" when it can)."""
    if router.kind == "peer" and not installed(PEERS[router.key]):
        return "not installed (pip install '.[bench]')"
    if (router.kind == "dynamo" or router.precise) and fleet.kind != "mocker":
        return "needs Dynamo's mock engines (--regime dynamo)"
    return ""


@contextlib.asynccontextmanager
async def driving(router: Router, engines: Engines, bench: Bench) -> AsyncIterator[Driver]:
    """A driver for `router` in front of `engines`, its processes started."""
    started = time.perf_counter()
    driver: Driver
    if router.kind == "gateway":
        context = gateways(router.replicas, router.shared, router.precise, engines, bench)
    elif router.kind == "grpc":
        context = grpc_pickers(engines, bench)
    elif router.kind == "peer":
        context = _peer(router, engines, bench)
    elif router.kind == "dynamo":
        context = _fixed(ProxyDriver([engines.router_url]))
    else:
        context = _fixed(DirectDriver(engines.urls, router.key, bench.seed))
    async with context as driver:
        log(f"{router.label}: ready in {time.perf_counter() - started:.1f} s")
        yield driver


@contextlib.asynccontextmanager
async def _fixed(driver: Driver) -> AsyncIterator[Driver]:
    try:
        yield driver
    finally:
        await driver.close()


@contextlib.asynccontextmanager
async def _peer(router: Router, engines: Engines, bench: Bench) -> AsyncIterator[Driver]:
    async with (
        peer_running(PEERS[router.key], engines.urls, PROBE, bench.log_dir) as peer,
        _fixed(ProxyDriver([peer.url])) as driver,
    ):
        yield driver

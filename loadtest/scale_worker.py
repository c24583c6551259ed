"""One process of `loadtest.bench_scale`: a few picker replicas' real cluster layer under load.

    python -m loadtest.scale_worker '<json Job>'

Each replica is kinference's own cluster layer (`ClusterNode`: outbox, per-pool publishers
and readers, membership, statistics) with its own worker table, prefix index and `InFlight`
counter, exactly as `kinference.app` builds it, minus gRPC: requests are driven into
`InFlight` (pick, first token, ITL, release) at a Poisson rate, so the events, their batching
and the Redis commands are the real ones. A probe replica takes no traffic and measures
what every replica pays to follow the others: its process CPU over the window, and the
propagation delay of each pick (the first prefix block hash carries its creation time in
microseconds; the other hashes are random, as real ones look).

Once its replicas have started (bootstrapped from Redis) it prints `ready` and reads the
run's schedule, one JSON line on stdin (`Schedule`: the same wall-clock times for every
process, set once all are ready: a schedule fixed at launch was over before processes that
took ~10 s to import and start on a loaded machine had begun). Then prints one JSON object:
cpu seconds over the window, requests driven, and on the probe the propagation delays (ms)
and the events applied.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import resource
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import uvloop

from kinference.cluster import codec
from kinference.cluster.connection import Timeouts, connect
from kinference.cluster.keys import Keys
from kinference.cluster.node import ClusterNode
from kinference.cluster.outbox import Outbox
from kinference.cluster.replication import READ_BLOCK_MS
from kinference.config import Policy
from kinference.routing import PrefixIndex, ProviderHealth, Router, TenantGate, WorkerTable
from kinference.routing.decision import LocalChoice
from kinference.routing.inflight import InFlight
from kinference.routing.policy import cooldowns_of

ENDPOINTS_PER_POOL = 8
MODEL = "bench-model"
TTFT_S = 0.2  # seconds from pick to first token
DURATION_S = 1.0  # seconds from pick to the final report (ITL counts, release)
# Prompt-size mix: (share, prefix blocks of 64 chars); 256 blocks is the default max_blocks.
PROMPT_MIX = ((0.5, 16), (0.35, 128), (0.15, 256))


@dataclass(frozen=True)
class Job:
    url: str
    replicas: int
    rate: float  # requests per second over this process's replicas
    pools: int
    probe: bool = False
    seed: int = 1


@dataclass(frozen=True)
class Schedule:
    start_at: float  # wall seconds: traffic starts
    measure_at: float  # wall seconds: the measured window opens
    end_at: float  # wall seconds: the window closes and traffic stops


def pool_map(pools: int) -> dict[str, tuple[str, ...]]:
    return {
        f"bench/p{p}": tuple(f"10.{p // 250}.{p % 250}.{e}:8000" for e in range(ENDPOINTS_PER_POOL))
        for p in range(pools)
    }


def mean_blocks() -> float:
    return sum(share * blocks for share, blocks in PROMPT_MIX)


def _router(table: WorkerTable) -> Router:
    """A router over `table` with the default policy: the node folds events in through it."""
    policy = Policy()
    health = ProviderHealth(cooldowns_of(policy))
    return Router(
        policy, table=table, prefix=PrefixIndex(50_000), health=health,
        tenants=TenantGate(), rng=random.Random(0),
    )  # fmt: skip


class Replica:
    """One replica: its routing state and cluster node, and requests driven into them."""

    def __init__(self, job: Job, index: int, pools: dict[str, tuple[str, ...]]) -> None:
        self.table = WorkerTable()
        self.outbox = Outbox()
        self.inflight = InFlight(self.table, ttl_s=600.0, journal=self.outbox)
        timeouts = Timeouts(connect_s=2.0, command_s=2.0)
        self.node = ClusterNode(
            redis=connect(job.url, timeouts),
            reader_redis=connect(job.url, timeouts, block_s=READ_BLOCK_MS / 1000),
            keys=Keys("bench:"),
            router=_router(self.table),
            outbox=self.outbox,
            own_load=lambda: self.inflight.own,
            stale_after_s=2.0,
            stream_maxlen=20_000,
            batch_s=0.015,
            pools=lambda: pools,
        )
        self._pools = list(pools.items())
        self._rng = random.Random(job.seed * 1000 + index)
        self._np = np.random.default_rng(job.seed * 1000 + index)
        self._next_id = 0
        self.requests = 0

    def pick(self) -> None:
        ref, endpoints = self._rng.choice(self._pools)
        endpoint = self._rng.choice(endpoints)
        blocks = self._rng.choices([b for _, b in PROMPT_MIX], [s for s, _ in PROMPT_MIX])[0]
        hashes = self._np.integers(0, 2**63, size=blocks, dtype=np.int64).tolist()
        hashes[0] = time.time_ns() // 1000  # creation time, read back by the probe
        self._next_id += 1
        rid = self._next_id
        choice = LocalChoice(endpoint, self.table.slot(endpoint), ref, MODEL)
        self.inflight.add(rid, choice, "", tuple(hashes))
        self.requests += 1
        loop = asyncio.get_running_loop()
        loop.call_later(TTFT_S, self.outbox.first_token, endpoint, MODEL, TTFT_S * 1000)
        loop.call_later(DURATION_S, self.finish, rid, endpoint)

    def finish(self, rid: int, endpoint: str) -> None:
        counts = [0] * 15
        counts[4] = 40  # 40 tokens in the 20-30 ms bucket
        self.outbox.itl(endpoint, MODEL, counts)
        self.inflight.release(rid)


class Probe:
    """Wraps a replica's shard views: propagation delay of each pick, events applied."""

    def __init__(self, node: ClusterNode) -> None:
        self.delays_ms: list[float] = []
        self.events = 0
        self.entries = 0
        self._node = node
        self._wrapped: set[int] = set()
        self.measuring = False

    def wrap_all(self) -> None:
        for shard in self._node.shards:
            if id(shard.view) not in self._wrapped:
                self._wrapped.add(id(shard.view))
                shard.view.apply = self._wrap(shard.view.apply)  # type: ignore[method-assign]

    def _wrap(self, apply: Any) -> Any:
        def measured(entry: codec.Entry) -> None:
            apply(entry)
            if not self.measuring:
                return
            now_us = time.time_ns() // 1000
            self.entries += 1
            self.events += len(entry.events)
            for event in entry.events:
                if event[0] == codec.PICKED and event[3]:
                    packed = event[3]
                    raw = packed if isinstance(packed, bytes) else base64.b64decode(packed[:12])
                    first = int.from_bytes(raw[:8], "little")
                    self.delays_ms.append((now_us - first) / 1000)

        return measured


async def drive(replicas: list[Replica], job: Job, schedule: Schedule) -> None:
    """Poisson arrivals at `job.rate` over the replicas until `end_at`."""
    rng = random.Random(job.seed)
    await until(schedule.start_at)
    next_at = time.monotonic()
    end = time.monotonic() + (schedule.end_at - time.time())
    while job.rate > 0 and next_at < end:
        next_at += rng.expovariate(job.rate)
        delay = next_at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        rng.choice(replicas).pick()


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def until(wall_s: float) -> None:
    """Sleep until a wall-clock time shared by every process of the run."""
    await asyncio.sleep(max(wall_s - time.time(), 0.0))


async def window_cpu(schedule: Schedule, probe: Probe | None) -> float:
    await until(schedule.measure_at)
    if probe is not None:
        probe.wrap_all()
        probe.measuring = True
    before = cpu_s()
    await until(schedule.end_at)
    if probe is not None:
        probe.measuring = False
    return cpu_s() - before


async def run(job: Job) -> dict[str, Any]:
    pools = pool_map(job.pools)
    replicas = [Replica(job, i, pools) for i in range(job.replicas)]
    await asyncio.gather(*(r.node.start(bootstrap_timeout_s=10.0) for r in replicas))
    print("ready", flush=True)
    schedule = Schedule(**json.loads(await asyncio.to_thread(sys.stdin.readline)))
    probe = Probe(replicas[0].node) if job.probe else None
    try:
        driving = asyncio.create_task(drive(replicas, job, schedule))
        cpu = await window_cpu(schedule, probe)
        await driving
        requests = sum(r.requests for r in replicas)
    finally:
        for replica in replicas:
            await replica.node.stop()
    result: dict[str, Any] = {"job": asdict(job), "cpu_s": cpu, "requests": requests}
    if probe is not None:
        result |= {"delays_ms": probe.delays_ms, "events": probe.events, "entries": probe.entries}
    return result


def main() -> int:
    job = Job(**json.loads(sys.argv[1]))
    print(json.dumps(uvloop.run(run(job))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A replica's cluster layer over one Redis, wired as `kinference.cluster.node` wires it:
its router's view of the others, and its shards (the production flush, `Shards.flush`)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping

from kinference.cluster.connection import RedisClient
from kinference.cluster.keys import Keys
from kinference.cluster.outbox import Outbox
from kinference.cluster.shards import Shards, Wiring
from kinference.cluster.stats import StatsBuffer
from kinference.cluster.view import ClusterView
from kinference.config import parse_policy
from kinference.routing import PrefixIndex, ProviderHealth, Router, TenantGate, WorkerTable
from kinference.routing.policy import cooldowns_of


def view_of(
    table: WorkerTable, prefix: PrefixIndex, clock: Callable[[], float] = time.monotonic
) -> ClusterView:
    """A view folding into a router over `table` and `prefix`."""
    policy = parse_policy(
        'pools:\n  - {name: p, endpoints: ["10.0.0.1:8000", "10.0.0.2:8000"], models: [m]}\n'
    )  # the pool the samples' endpoints serve
    router = Router(
        policy, table=table, prefix=prefix, health=ProviderHealth(cooldowns_of(policy)),
        tenants=TenantGate(), rng=random.Random(0),
    )  # fmt: skip
    return ClusterView(router, clock=clock)


def shards_of(
    redis: RedisClient,
    instance: str,
    outbox: Outbox,
    own_load: Callable[[], Mapping[str, int]] = dict,
    *,
    keys: Keys | None = None,
    stats: StatsBuffer | None = None,
    table: WorkerTable | None = None,
    maxlen: int = 100_000,
) -> Shards:
    """`instance`'s shards (the global one; `set_pools` adds the pools'), flushing `outbox`
    with the load `own_load` tells."""
    keys = Keys() if keys is None else keys
    router = view_of(WorkerTable() if table is None else table, PrefixIndex(1000)).router
    stats = StatsBuffer(redis, keys, instance) if stats is None else stats
    return Shards(
        Wiring(redis, redis, keys, router, outbox, own_load, stats, instance, maxlen, 0.0)
    )

"""A replica's membership in the cluster: the background loops that keep its view shared.

Nothing here runs on the Pick path. Each loop retries a failed Redis step with exponential
backoff and jitter (tenacity) for as long as it takes; while Redis is away the replica picks
from its local view and `gap()` says so (Picks answer DEGRADED); when Redis returns, the
reader bootstraps again and the publisher republishes a full snapshot of its own load.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass

from redis.exceptions import RedisError
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type
from tenacity import wait_exponential_jitter as backoff

from kinference.cluster.connection import RedisClient
from kinference.cluster.keys import Keys
from kinference.cluster.members import Membership
from kinference.cluster.outbox import Outbox
from kinference.cluster.replication import Publisher, Reader, read_block_ms
from kinference.cluster.shards import Shard, Shards, Wiring
from kinference.cluster.stats import StatsBuffer
from kinference.cluster.view import ClusterView
from kinference.routing.router import Router
from kinference.tasks import cancel_and_wait

log = logging.getLogger(__name__)

HEARTBEAT_S = 1.0  # seconds between heartbeats (the TTL is three of them)
POOLS_S = 1.0  # seconds between checks of the policy's pools (shards opened and closed)
LIVENESS_S = 0.5  # seconds between checks of the other replicas' heartbeats
STATS_S = 1.0  # seconds between writes of this minute's statistics
_ERRORS = (RedisError, OSError, asyncio.TimeoutError)

Step = Callable[[], Awaitable[None]]
PoolMap = Mapping[str, Collection[str]]  # pool ref -> its endpoints


def new_instance_id() -> str:
    """A replica's id for one process lifetime: a restart is a new replica."""
    return secrets.token_hex(6)


@dataclass(frozen=True, slots=True)
class Loop:
    """A background step run every `interval_s` seconds (0: as fast as it returns)."""

    name: str
    step: Step
    interval_s: float
    # Whether a success of this step proves Redis usable: only a step that always sends a
    # write does (a read-only or idle step succeeds against a Redis that refuses writes).
    proves_connection: bool = False


class ClusterNode:
    """Owns the Redis clients and runs the replication, membership and extra loops."""

    def __init__(
        self,
        *,
        redis: RedisClient,
        reader_redis: RedisClient,
        keys: Keys,
        router: Router,
        outbox: Outbox,
        own_load: Callable[[], Mapping[str, int]],
        stale_after_s: float,
        stream_maxlen: int,
        batch_s: float = 0.015,
        pools: Callable[[], PoolMap] = dict,
        on_cooled: Callable[[str], None] = lambda provider: None,
        instance: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_lost: Callable[[], None] = lambda: None,
    ) -> None:
        self.instance = instance or new_instance_id()
        self._on_lost = on_lost  # called at each failure of a loop (the budget's loop sleeps)
        self.redis = redis
        self.reader_redis = reader_redis
        self.keys = keys
        self.outbox = outbox
        self.stale_after_s = stale_after_s
        self.batch_s = batch_s  # seconds events gather before a flush, and reads pause
        self._clock = clock
        self.stats = StatsBuffer(redis, keys, self.instance)
        self.shards = Shards(
            Wiring(
                redis, reader_redis, keys, router, outbox, own_load, self.stats,
                self.instance, stream_maxlen, batch_s, on_cooled, clock,
                read_block_ms(stale_after_s),
            )
        )  # fmt: skip
        self._pools = pools  # the pools the policy routes to now
        self.shards.set_pools(pools())
        self.members = Membership(redis, keys, self.instance, lambda: list(self.shards))
        self.connected = False
        self.last_error = ""
        # Loops whose last attempt failed: connected again only once none is left (and a
        # write went through), so a refusal that spares one step (NOPERM on XADD alone, an
        # events key of another type) does not flap to connected at each heartbeat.
        self._failing: set[str] = set()
        self._proved = False  # a step that always writes succeeded since the last failure
        self._own_load = own_load
        self._started_at = clock()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._loops: list[Loop] = [
            Loop("publish", self._publish, 0.0),
            Loop("read", self.shards.read, 0.0),
            Loop("heartbeat", self._beat, HEARTBEAT_S, proves_connection=True),
            Loop("liveness", self.members.check, LIVENESS_S),
            Loop("stats", self.stats.flush, STATS_S),
            Loop("pools", self._follow_pools, POOLS_S),
        ]

    @property
    def view(self) -> ClusterView:
        """The global shard's view (provider cool-downs arrive there)."""
        return self.shards.top.view

    @property
    def publisher(self) -> Publisher:
        return self.shards.top.publisher

    @property
    def reader(self) -> Reader:
        return self.shards.top.reader

    def shard(self, pool: str) -> Shard:
        """A pool's shard (the global one for a pool without a shard of its own)."""
        return self.shards.pools.get(pool, self.shards.top)

    async def _follow_pools(self) -> None:
        """Open shards for pools the policy gained, close those of pools it lost."""
        _added, removed = self.shards.set_pools(self._pools())
        for shard in removed:
            for instance in shard.view.instances():
                shard.view.drop(instance)
            with contextlib.suppress(*_ERRORS):  # else it expires with the heartbeat TTL
                await self.redis.delete(shard.keys.load(self.instance))

    def add_loop(self, name: str, step: Step, interval_s: float) -> None:
        """Run another background step (blacklist, leases, scrape leadership) with the
        same retry and connectivity handling; call before `start`."""
        self._loops.append(Loop(name, step, interval_s))

    @property
    def replicas(self) -> int:
        return self.members.replicas

    def gap(self) -> str | None:
        """Why the shared view is incomplete now, or None when it is current."""
        readers, now = [shard.reader for shard in self.shards], self._clock()
        if self.bootstrapped and not self.connected:
            return f"shared state not current: Redis unavailable{self._error()}"
        if not self.bootstrapped:
            waited = now - self._started_at
            return f"shared state not loaded from Redis yet ({waited:.1f}s){self._error()}"
        age = max(now - (reader.last_read_at or self._started_at) for reader in readers)
        if age > self.stale_after_s:
            return f"shared state is {age:.1f}s old: Redis unreachable{self._error()}"
        return None

    def _error(self) -> str:
        return f" ({self.last_error})" if self.last_error else ""

    async def start(self, *, bootstrap_timeout_s: float) -> None:
        """Start every loop; wait (bounded) for the first bootstrap so that the first
        Picks already score with the cluster's state."""
        for loop in self._loops:
            self._tasks[loop.name] = asyncio.create_task(
                self._run(loop), name=f"kinference-cluster-{loop.name}"
            )
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(bootstrap_timeout_s):
                while not (self.bootstrapped and self.connected):  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
        if not self.bootstrapped:
            log.warning("serving before the shared state loaded: %s", self.gap())

    @property
    def bootstrapped(self) -> bool:
        return all(shard.reader.bootstrapped for shard in self.shards)

    async def _run(self, loop: Loop) -> None:
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(_ERRORS),
            # At most 1 s between attempts: a heartbeat must come back well within its TTL.
            wait=backoff(multiplier=0.05, max=1.0, jitter=0.1),
            before_sleep=lambda state: self._failed(loop.name, state),
        )
        while True:
            try:
                await retrying(self._once, loop)
            except Exception:  # a bug must not end replication for the process's life
                log.exception("cluster loop %s failed; restarting it in 1 s", loop.name)
                await asyncio.sleep(1.0)
            if loop.interval_s:
                await asyncio.sleep(loop.interval_s)

    async def _beat(self) -> None:
        try:
            lost = await self.members.beat()
        except Exception:
            for shard in self.shards:
                shard.publisher.owe_snapshot()
            raise
        own = self._own_load()
        for shard in lost:
            if any(self.shards.pool_of(endpoint) == shard.pool for endpoint in own):
                shard.publisher.owe_snapshot()

    async def _publish(self) -> None:
        await self.outbox.wakeup.wait()  # sleeps until there is something to send
        if not self.outbox.urgent and not self.outbox.backlogged:  # let more events join
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.batch_s):
                    await self.outbox.urgent_wakeup.wait()
        await self.shards.flush()

    async def _once(self, loop: Loop) -> None:
        """Run one step. `connected` follows the loops' last attempts: any step's failure
        (unreachable, or refusing writes: OOM, READONLY, NOPERM) clears it; it is set again
        once no loop's last attempt failed and a step that always writes went through since,
        so a Redis answering reads (or some writes) but refusing others reads as unavailable,
        and the log says each change once."""
        await loop.step()
        self._failing.discard(loop.name)
        self._proved = self._proved or loop.proves_connection
        if self._proved and not self._failing and not self.connected:
            log.info("Redis available again (%s)", loop.name)
            self.connected, self.last_error = True, ""

    def _failed(self, name: str, state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        text = f"{type(error).__name__}: {error}" if error else "unknown error"
        if self.connected or not self.last_error:
            log.warning("Redis unavailable, picking from the local view: %s", text)
        self.connected, self.last_error = False, text[:200]
        self._failing.add(name)
        self._proved = False
        self._on_lost()

    async def suspend(self, name: str) -> None:
        """Stop one loop (e.g. "read": every shard's reads) until `resume`; the rest go on."""
        for loop in self._named(name):
            task = self._tasks.pop(loop.name, None)
            await cancel_and_wait(task, recancel_s=_CANCEL_RECHECK_S)
            self._failing.discard(loop.name)  # a stopped loop's last failure no longer holds

    def resume(self, name: str) -> None:
        for loop in self._named(name):
            if loop.name not in self._tasks:
                self._tasks[loop.name] = asyncio.create_task(self._run(loop))

    def _named(self, name: str) -> list[Loop]:
        return [
            loop for loop in self._loops if loop.name.partition(":")[0] == name or loop.name == name
        ]

    async def crash(self) -> None:
        """Stop dead, without a goodbye (what a killed process does): for fault tests."""
        for name in list(self._tasks):
            await self.suspend(name)

    async def stop(self) -> None:
        """Stop the loops, send what is queued and leave the cluster (best effort)."""
        await cancel_and_wait(*self._tasks.values(), recancel_s=_CANCEL_RECHECK_S)
        self._tasks.clear()
        with contextlib.suppress(*_ERRORS):
            await self.shards.flush()
            await self.members.leave()
        await self.close()

    async def close(self) -> None:
        await self.redis.aclose()
        await self.reader_redis.aclose()


# Seconds between repeated cancels of a loop that swallowed one: a cancel that lands as a
# timeout inside the step fires can surface as TimeoutError, which the loop retries, and
# then `stop` waited forever.
_CANCEL_RECHECK_S = 0.05

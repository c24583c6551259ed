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
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from redis.exceptions import RedisError
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type
from tenacity import wait_exponential_jitter as backoff

from kinference.cluster.connection import RedisClient
from kinference.cluster.keys import Keys
from kinference.cluster.members import Membership
from kinference.cluster.outbox import Outbox
from kinference.cluster.replication import Publisher, Reader
from kinference.cluster.stats import StatsBuffer
from kinference.cluster.view import ClusterView

log = logging.getLogger(__name__)

HEARTBEAT_S = 1.0  # seconds between heartbeats (the TTL is three of them)
LIVENESS_S = 0.5  # seconds between checks of the other replicas' heartbeats
STATS_S = 1.0  # seconds between writes of this minute's statistics
_ERRORS = (RedisError, OSError, asyncio.TimeoutError)

Step = Callable[[], Awaitable[None]]


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
        view: ClusterView,
        outbox: Outbox,
        own_load: Callable[[], Mapping[str, int]],
        stale_after_s: float,
        stream_maxlen: int,
        batch_s: float = 0.015,
        instance: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.instance = instance or new_instance_id()
        self.redis = redis
        self._reader_redis = reader_redis
        self.keys = keys
        self.view = view
        self.outbox = outbox
        self.stale_after_s = stale_after_s
        self.batch_s = batch_s  # seconds events gather before a flush, and reads pause
        self._clock = clock
        self.stats = StatsBuffer(redis, keys, self.instance)
        self.publisher = Publisher(
            redis,
            keys,
            self.instance,
            outbox,
            own_load=own_load,
            stats=self.stats,
            maxlen=stream_maxlen,
        )
        self.reader = Reader(reader_redis, keys, self.instance, view, clock=clock, pause_s=batch_s)
        self.members = Membership(redis, keys, self.instance, view)
        self.connected = False
        self.last_error = ""
        self._own_load = own_load
        self._started_at = clock()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._loops: list[Loop] = [
            Loop("publish", self._publish, 0.0),
            Loop("read", self.reader.step, 0.0),
            Loop("heartbeat", self._beat, HEARTBEAT_S, proves_connection=True),
            Loop("liveness", self.members.check, LIVENESS_S),
            Loop("stats", self.stats.flush, STATS_S),
        ]

    def add_loop(self, name: str, step: Step, interval_s: float) -> None:
        """Run another background step (blacklist, leases, scrape leadership) with the
        same retry and connectivity handling; call before `start`."""
        self._loops.append(Loop(name, step, interval_s))

    @property
    def replicas(self) -> int:
        return self.members.replicas

    def gap(self) -> str | None:
        """Why the shared view is incomplete now, or None when it is current."""
        reader, now = self.reader, self._clock()
        if reader.bootstrapped and not self.connected:
            return f"shared state not current: Redis unavailable{self._error()}"
        if not reader.bootstrapped:
            waited = now - self._started_at
            return f"shared state not loaded from Redis yet ({waited:.1f}s){self._error()}"
        age = now - (reader.last_read_at or self._started_at)
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
                while not (self.reader.bootstrapped and self.connected):  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
        if not self.reader.bootstrapped:
            log.warning("serving before the shared state loaded: %s", self.gap())

    async def _run(self, loop: Loop) -> None:
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(_ERRORS),
            # At most 1 s between attempts: a heartbeat must come back well within its TTL.
            wait=backoff(multiplier=0.05, max=1.0, jitter=0.1),
            before_sleep=self._failed,
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
            load_hash_present = await self.members.beat()
        except Exception:
            self.publisher.owe_snapshot()
            raise
        if not load_hash_present and self._own_load():
            self.publisher.owe_snapshot()

    async def _publish(self) -> None:
        await self.outbox.wakeup.wait()  # sleeps until there is something to send
        if not self.outbox.urgent:  # let more events join the batch
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.batch_s):
                    await self.outbox.urgent_wakeup.wait()
        await self.publisher.flush()

    async def _once(self, loop: Loop) -> None:
        """Run one step. `connected` follows the last real command: any step's failure
        (unreachable, or refusing writes: OOM, READONLY, NOPERM) clears it, and only a step
        that always writes sets it again, so a Redis answering reads but refusing writes
        reads as unavailable, and the log says each change once."""
        await loop.step()
        if loop.proves_connection and not self.connected:
            log.info("Redis available again (%s)", loop.name)
            self.connected, self.last_error = True, ""

    def _failed(self, state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        text = f"{type(error).__name__}: {error}" if error else "unknown error"
        if self.connected or not self.last_error:
            log.warning("Redis unavailable, picking from the local view: %s", text)
        self.connected, self.last_error = False, text[:200]

    async def suspend(self, name: str) -> None:
        """Stop one loop (e.g. "read") until `resume`; the rest go on."""
        task = self._tasks.pop(name, None)
        if task is not None:
            await _cancel(task)

    def resume(self, name: str) -> None:
        loop = next(loop for loop in self._loops if loop.name == name)
        if name not in self._tasks:
            self._tasks[name] = asyncio.create_task(self._run(loop))

    async def crash(self) -> None:
        """Stop dead, without a goodbye (what a killed process does): for fault tests."""
        for name in list(self._tasks):
            await self.suspend(name)

    async def stop(self) -> None:
        """Stop the loops, send what is queued and leave the cluster (best effort)."""
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            await _cancel(task)
        self._tasks.clear()
        with contextlib.suppress(*_ERRORS):
            await self.publisher.flush()
            await self.members.leave()
        await self.close()

    async def close(self) -> None:
        await self.redis.aclose()
        await self._reader_redis.aclose()


_CANCEL_RECHECK_S = 0.05  # seconds between repeated cancels of a loop that swallowed one


async def _cancel(task: asyncio.Task[None]) -> None:
    """Cancel a loop and wait for its end, cancelling again while it runs: a cancel can be
    lost (one that lands as a timeout inside the step fires can surface as TimeoutError,
    which the loop retries), and then `stop` waited forever."""
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=_CANCEL_RECHECK_S)
    with contextlib.suppress(asyncio.CancelledError):
        await task

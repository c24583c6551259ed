"""The shared state in shards: one per pool the replica routes to, plus the global one.

A pool's shard is its events stream, its replicas' load hashes, its engine readings and its
scrape lease, all under the pool's hash tag (`{kinference:default/chat}`), so Redis Cluster
spreads pools over its masters and a replica reads only the streams of its own pools. Each
shard has its own publisher (its own flush sequence numbers, so a reader of one pool sees no
gaps from another's flushes), its own reader and its own view of the other replicas' load;
the views share the worker table and the prefix index, and each one adds or removes only its
own pool's part. The global shard (`{kinference}:events`) carries provider cool-downs, the
events of endpoints outside every pool, and everything in the `single` layout; every replica
reads it, which also makes it see replicas of the old, unsharded schema during an upgrade.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from redis.asyncio.cluster import RedisCluster

from kinference.cluster import codec
from kinference.cluster.connection import RedisClient
from kinference.cluster.keys import SINGLE_LAYOUT, Keys
from kinference.cluster.outbox import Outbox
from kinference.cluster.replication import READ_BLOCK_MS, READ_COUNT, Publisher, Reader
from kinference.cluster.stats import StatsBuffer
from kinference.cluster.view import ClusterView
from kinference.routing.router import Router

log = logging.getLogger(__name__)

GLOBAL = ""  # the pool name of the global shard
IDLE_POLL_MAX_S = 0.05  # seconds: on Cluster, idle shards are polled at least this often
IDLE_POLL_MIN_S = 0.005
# Seconds a shard's reads find nothing before a check that its stream did not go back: its
# newest id below the reader's last one (deleted and recreated by a server whose clock is
# behind the ids it had), which every read then skipped, the view silently stale.
BACKWARDS_CHECK_S = 2.0
# Carried in the endpoint's pool shard. PREFILLING must travel with the PICKED before it.
_EVENTS_WITH_ENDPOINT = frozenset(
    {codec.PICKED, codec.RELEASED, codec.FIRST_TOKEN, codec.ITL, codec.ENGINE,
     codec.PREFILLING, codec.PREFILLED, codec.SHORTFALL, codec.CONFIRMED}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Shard:
    pool: str  # GLOBAL for the global shard
    keys: Keys
    view: ClusterView
    publisher: Publisher
    reader: Reader


@dataclass(frozen=True, slots=True)
class Wiring:
    """What every shard of one replica shares."""

    redis: RedisClient
    reader_redis: RedisClient
    keys: Keys  # the global keys
    router: Router  # the views fold the other replicas' events in through it
    outbox: Outbox
    own_load: Callable[[], Mapping[str, int]]
    stats: StatsBuffer
    instance: str
    maxlen: int
    batch_s: float
    on_cooled: Callable[[str], None] = lambda provider: None  # another replica blacklisted
    clock: Callable[[], float] = time.monotonic
    read_block_ms: int = READ_BLOCK_MS  # how long an idle read waits (`read_block_ms`)


class Shards:
    """The global shard and one per routed pool; splits each flush among them."""

    def __init__(self, wiring: Wiring) -> None:
        self._wiring = wiring
        self.top = self._shard(GLOBAL)
        self.pools: dict[str, Shard] = {}
        self._pool_of: dict[str, str] = {}  # endpoint -> pool whose shard carries it
        self._idle_s = 0.0  # seconds the next poll waits after polls that found nothing
        self._empty_since: dict[str, float] = {}  # pool -> since when its reads find nothing

    def __iter__(self) -> Iterator[Shard]:
        yield self.top
        yield from self.pools.values()

    def _shard(self, pool: str) -> Shard:
        w = self._wiring
        keys = w.keys.for_pool(pool)
        view = ClusterView(w.router, on_cooled=w.on_cooled, clock=w.clock)
        publisher = Publisher(w.redis, keys, w.instance, w.outbox, stats=w.stats, maxlen=w.maxlen)
        reader = Reader(
            w.reader_redis,
            keys,
            w.instance,
            view,
            clock=w.clock,
            seed_stats=pool == GLOBAL,
        )
        return Shard(pool, keys, view, publisher, reader)

    def pool_of(self, endpoint: str) -> str:
        return self._pool_of.get(endpoint, GLOBAL)

    def _own(self, pool: str) -> dict[str, int]:
        return {e: n for e, n in self._wiring.own_load().items() if self.pool_of(e) == pool}

    def set_pools(self, pools: Mapping[str, Collection[str]]) -> tuple[list[Shard], list[Shard]]:
        """Route to these pools (ref -> endpoints); returns the shards added and removed.
        An endpoint in several pools travels in the first one's shard (by name)."""
        if self._wiring.keys.layout == SINGLE_LAYOUT:
            pools = {}
        pool_of: dict[str, str] = {}
        for ref in sorted(pools):
            for endpoint in pools[ref]:
                pool_of.setdefault(endpoint, ref)
        if pool_of == self._pool_of and set(pools) == set(self.pools):
            return [], []
        added = [self._shard(ref) for ref in sorted(set(pools) - set(self.pools))]
        removed = [self.pools.pop(ref) for ref in sorted(set(self.pools) - set(pools))]
        self.pools.update((shard.pool, shard) for shard in added)
        self._pool_of = pool_of
        for shard in self:  # endpoints may have moved between shards: republish all
            shard.publisher.owe_snapshot()
        return added, removed

    def split(
        self, events: list[list[Any]], dirty: set[str]
    ) -> dict[str, tuple[list[list[Any]], set[str]]]:
        """A batch cut by shard: each pool's events (in order) and dirty endpoints."""
        parts: dict[str, tuple[list[list[Any]], set[str]]] = {}
        for event in events:
            pool = self.pool_of(str(event[1])) if event[0] in _EVENTS_WITH_ENDPOINT else GLOBAL
            parts.setdefault(pool, ([], set()))[0].append(event)
        for endpoint in dirty:
            parts.setdefault(self.pool_of(endpoint), ([], set()))[1].add(endpoint)
        return parts

    async def flush(self) -> None:
        """Send what is queued (a batch at most: `Outbox.take`), each shard's part in its
        own pipeline, concurrently (raises the first Redis error; failed parts are back in
        the outbox). Each shard's load is taken with the batch, before any await: a Pick
        in between would be in the load sent and again in the next flush's deltas."""
        outbox = self._wiring.outbox
        if not len(outbox) and not outbox.dirty and not self.owe_snapshot():
            outbox.wakeup.clear()
            return
        events, dirty, dropped = outbox.take()
        # Events lost, or left queued (a backlog: this load counts them, the next flush's
        # deltas would again): every shard republishes its whole load, now and next time.
        backlog = bool(len(outbox))
        if dropped or backlog:
            for shard in self:
                shard.publisher.owe_snapshot()
        parts = self.split(events, dirty)
        targets = [s for s in self if s.pool in parts or s.publisher.snapshot_needed]
        results = await asyncio.gather(
            *(
                s.publisher.deliver(*parts.get(s.pool, ([], set())), self._own(s.pool))
                for s in targets
            ),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        if backlog:
            for shard in self:
                shard.publisher.owe_snapshot()

    async def read(self) -> None:
        """One read of every shard's stream (raises on a Redis error; every shard then
        bootstraps again). On one Redis (plain or Sentinel) that is one XREAD BLOCK over
        all the streams. On Cluster a command's keys must share a slot, so it is one
        pipeline of non-blocking reads (one round trip per master), polled after the read
        pause while entries come and backing off to IDLE_POLL_MAX_S while none do."""
        shards = list(self)
        try:
            for shard in shards:
                await shard.reader.ensure_bootstrapped()
            answered = await self._read_once(shards)
            await self._check_backwards(
                [shard for shard, found in zip(shards, answered, strict=True) if not found]
            )
        except Exception:
            for shard in shards:
                shard.reader.bootstrap_needed = True
            raise
        found, pause = any(answered), self._wiring.batch_s
        if isinstance(self._wiring.reader_redis, RedisCluster) and not found:
            self._idle_s = min(max(2 * self._idle_s, pause, IDLE_POLL_MIN_S), IDLE_POLL_MAX_S)
            await asyncio.sleep(self._idle_s)
        elif found:
            self._idle_s = 0.0
            if pause:
                await asyncio.sleep(pause)

    async def _read_once(self, shards: list[Shard]) -> list[bool]:
        """One read of every shard; returns which found entries."""
        redis = self._wiring.reader_redis
        if isinstance(redis, RedisCluster):
            # XRANGE from the exclusive last id, not XREAD: redis-py finds XREAD's slot with
            # a COMMAND GETKEYS round trip per call (its keys move), XRANGE's locally.
            pipe = redis.pipeline(transaction=False)
            for shard in shards:
                pipe.xrange(shard.keys.events(), f"({shard.reader.last_id}", count=READ_COUNT)
            ranges = await pipe.execute()
            answers = [
                [(shard.keys.events(), entries)] if entries else None
                for shard, entries in zip(shards, ranges, strict=True)
            ]
        else:
            streams = {shard.keys.events(): shard.reader.last_id for shard in shards}
            block = self._wiring.read_block_ms
            reply = await redis.xread(streams, count=READ_COUNT, block=block)
            by_name = {_text(name): [(name, entries)] for name, entries in reply or ()}
            answers = [by_name.get(shard.keys.events()) for shard in shards]
        for shard, answer in zip(shards, answers, strict=True):
            await shard.reader.consume(answer)
        return [bool(answer) for answer in answers]

    async def _check_backwards(self, empty: list[Shard]) -> None:
        """Of the shards whose reads found nothing for BACKWARDS_CHECK_S, bootstrap (at the
        next read) those whose stream's newest id is below their last."""
        now, since = self._wiring.clock(), self._empty_since
        for pool in set(since) - {shard.pool for shard in empty}:
            del since[pool]
        shards = [shard for shard in empty if now - since.setdefault(shard.pool, now) >= (
            BACKWARDS_CHECK_S)]  # fmt: skip
        if not shards:
            return
        for shard in shards:
            since[shard.pool] = now
        pipe = self._wiring.reader_redis.pipeline(transaction=False)
        for shard in shards:
            pipe.xrevrange(shard.keys.events(), count=1)
        for shard, newest in zip(shards, await pipe.execute(), strict=True):
            if newest and _id(newest[0][0]) < _id(shard.reader.last_id):
                log.warning("the events stream %s went back: reading it anew", shard.keys.events())
                shard.reader.bootstrap_needed = True

    def owe_snapshot(self) -> bool:
        return any(shard.publisher.snapshot_needed for shard in self)


def _id(entry_id: bytes | str) -> tuple[int, int]:
    milliseconds, _, sequence = _text(entry_id).partition("-")
    return int(milliseconds), int(sequence or 0)


def _text(name: bytes | str) -> str:
    return name.decode() if isinstance(name, bytes) else name

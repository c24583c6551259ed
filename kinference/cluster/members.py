"""Replica membership: heartbeats, and the other replicas' liveness.

Each replica refreshes its heartbeat (a key, and its stamp in one sorted set, so that a
liveness check is one read however many replicas there are, not one EXISTS each) and its
load hashes' TTL every second; a replica silent for HEARTBEAT_TTL_MS loses both, and every
other replica, checking twice a second, drops its load from the workers it was counted on.
A live replica missing from the view (dropped while its heartbeat had lapsed, and quiet
since) is read back from its load hash, so long-running requests it holds are not
forgotten until it publishes again.
Membership is global; load hashes are per shard (one per pool), so each shard's view is
kept and restored on its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kinference.cluster.connection import RedisClient, check_replies
from kinference.cluster.keys import HEARTBEAT_TTL_MS, Keys
from kinference.cluster.loads import load_reply
from kinference.cluster.shards import Shard

log = logging.getLogger(__name__)

# Beat: stamp this replica in the `alive` set with the server's clock (replicas' clocks may
# disagree), and prune members silent for ten heartbeat TTLs.
_BEAT = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 10 * ARGV[2])
return 1
"""
# The members that beat within the TTL, by the server's clock.
_ALIVE = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], now - ARGV[1], '+inf')
"""


# Liveness checks between re-reads of every live replica's load hash (`_restore`): 4 s.
RECONCILE_EVERY = 8


class Membership:
    def __init__(
        self, redis: RedisClient, keys: Keys, instance: str, shards: Callable[[], list[Shard]]
    ) -> None:
        self._redis = redis
        self._keys = keys
        self.instance = instance
        self._shards = shards
        self.replicas = 1  # live replicas seen at the last check, this one included
        # (pool, member): live replicas with no load hash in that shard (they route to other
        # pools); not asked again while they live.
        self._absent: set[tuple[str, str]] = set()
        self._checks = 0
        # (pool, member) -> its load hash's seq, found ahead of the view at the last re-read
        self._ahead: dict[tuple[str, str], int] = {}

    async def beat(self) -> list[Shard]:
        """Announce this replica as alive (raises on a Redis error); returns the shards whose
        load hash of ours is gone (a restarted Redis has lost it)."""
        keys, shards = self._keys, self._shards()
        pipe = self._redis.pipeline(transaction=False)
        pipe.set(keys.heartbeat(self.instance), b"1", px=HEARTBEAT_TTL_MS)
        pipe.sadd(keys.instances(), self.instance)
        pipe.eval(_BEAT, 1, keys.alive(), self.instance, HEARTBEAT_TTL_MS)
        for shard in shards:
            pipe.pexpire(shard.keys.load(self.instance), HEARTBEAT_TTL_MS)
        present = (await pipe.execute())[3:]
        return [shard for shard, there in zip(shards, present, strict=True) if not there]

    async def check(self) -> None:
        """Drop the load of replicas whose heartbeat expired; count the live ones."""
        keys, shards = self._keys, self._shards()
        pipe = self._redis.pipeline(transaction=False)
        pipe.smembers(keys.instances())
        pipe.eval(_ALIVE, 1, keys.alive(), HEARTBEAT_TTL_MS)
        known, beating = await pipe.execute()
        members = sorted(
            {m.decode() for m in known}.union(*(shard.view.instances() for shard in shards))
        )
        alive = await self._alive(members, {m.decode() for m in beating})
        # A replica still publishing is alive even if its heartbeat lapsed (its beat loop
        # may be backing off after a Redis outage that expired every key at once).
        ttl_s = HEARTBEAT_TTL_MS / 1000
        dead = [
            m
            for m, up in zip(members, alive, strict=True)
            if not up
            and m != self.instance
            and not any(shard.view.seen_within(m, ttl_s) for shard in shards)
        ]
        for member in dead:
            for shard in shards:
                shard.view.drop(member)
        self._absent = {(pool, m) for pool, m in self._absent if m not in dead}
        if dead:
            await self._redis.srem(keys.instances(), *dead)
        self.replicas = max(sum(1 for up in alive if up), 1)
        live = [m for m, up in zip(members, alive, strict=True) if up and m != self.instance]
        await self._restore(shards, live)

    async def _alive(self, members: list[str], beating: set[str]) -> list[bool]:
        """Which members live: those in the `alive` set, and those whose heartbeat key
        exists (replicas of a release before the set; checked one EXISTS each, so only
        the members missing from the set cost a command)."""
        others = [m for m in members if m not in beating]
        if not others:
            return [True] * len(members)
        pipe = self._redis.pipeline(transaction=False)
        for member in others:
            pipe.exists(self._keys.heartbeat(member))
        found = dict(zip(others, await pipe.execute(), strict=True))
        return [m in beating or bool(found[m]) for m in members]

    async def _restore(self, shards: list[Shard], live: list[str]) -> None:
        """Read live replicas that a shard's view lacks back from their load hashes; every
        RECONCILE_EVERY checks also those it has, taking a hash newer than what the view
        accounts for at two re-reads in a row (entries of it trimmed or deleted before the
        reader got to them, and no later entry, the writer idle since, to show the gap by
        its sequence number; twice, so that it is no flush under way: a delta flush writes
        its seq and its counts in two commands)."""
        self._checks += 1
        every = self._checks % RECONCILE_EVERY == 0
        ahead = self._ahead
        if every:
            self._ahead = {}
        asked = [
            (shard, member)
            for shard in shards
            for member in live
            if (every or member not in shard.view.seq) and (shard.pool, member) not in self._absent
        ]
        if not asked:
            return
        pipe = self._redis.pipeline(transaction=False)
        for shard, member in asked:
            pipe.hgetall(shard.keys.load(member))
        replies = check_replies(await pipe.execute(raise_on_error=False))
        for (shard, member), raw in zip(asked, replies, strict=True):
            counts, seq = load_reply(raw)
            known = shard.view.seq.get(member)
            # The reader may have taken an entry of it meanwhile (and resynced): it is
            # accounted for then, and an older hash must not overwrite it. A newer one may:
            # the entries up to its flush change nothing it holds (`ClusterView.apply`).
            if seq is None:
                if known is None:
                    self._absent.add((shard.pool, member))
            elif known is None:
                shard.view.replace(member, counts, seq)
            elif not every or seq <= known:
                continue
            elif ahead.get((shard.pool, member)) != seq:
                self._ahead[(shard.pool, member)] = seq  # taken if it is still so next time
            else:
                log.info("re-read the load of replica %s: entries of it went unread", member)
                shard.view.replace(member, counts, seq)

    async def leave(self) -> None:
        """A clean shutdown: our load vanishes at once rather than after the TTL."""
        keys = self._keys
        pipe = self._redis.pipeline(transaction=False)
        pipe.delete(keys.heartbeat(self.instance))
        pipe.zrem(keys.alive(), self.instance)
        for shard in self._shards():  # one DEL per key: they live in different slots
            pipe.delete(shard.keys.load(self.instance))
        pipe.srem(keys.instances(), self.instance)
        await pipe.execute()

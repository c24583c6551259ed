"""Replica membership: heartbeats, and the other replicas' liveness.

Each replica refreshes its heartbeat key and its load hash's TTL every second; a replica
silent for HEARTBEAT_TTL_MS loses both, and every other replica, checking four times a
second, drops its load from the workers it was counted on. A live replica missing from
the view (dropped while its heartbeat had lapsed, and quiet since) is read back from its
load hash, so long-running requests it holds are not forgotten until it publishes again.
"""

from __future__ import annotations

from kinference.cluster.connection import RedisClient
from kinference.cluster.keys import HEARTBEAT_TTL_MS, Keys
from kinference.cluster.replication import load_counts
from kinference.cluster.view import ClusterView


class Membership:
    def __init__(self, redis: RedisClient, keys: Keys, instance: str, view: ClusterView) -> None:
        self._redis = redis
        self._keys = keys
        self.instance = instance
        self._view = view
        self.replicas = 1  # live replicas seen at the last check, this one included

    async def beat(self) -> bool:
        """Announce this replica as alive (raises on a Redis error); returns whether its
        load hash is still there (a restarted Redis has lost it)."""
        keys = self._keys
        pipe = self._redis.pipeline(transaction=False)
        pipe.set(keys.heartbeat(self.instance), b"1", px=HEARTBEAT_TTL_MS)
        pipe.sadd(keys.instances(), self.instance)
        pipe.pexpire(keys.load(self.instance), HEARTBEAT_TTL_MS)
        _, _, present = await pipe.execute()
        return bool(present)

    async def check(self) -> None:
        """Drop the load of replicas whose heartbeat expired; count the live ones."""
        keys = self._keys
        members = sorted(
            {m.decode() for m in await self._redis.smembers(keys.instances())}
            | self._view.instances()
        )
        pipe = self._redis.pipeline(transaction=False)
        for member in members:
            pipe.exists(keys.heartbeat(member))
        alive = await pipe.execute()
        # A replica still publishing is alive even if its heartbeat lapsed (its beat loop
        # may be backing off after a Redis outage that expired every key at once).
        ttl_s = HEARTBEAT_TTL_MS / 1000
        dead = [
            m
            for m, up in zip(members, alive, strict=True)
            if not up and m != self.instance and not self._view.seen_within(m, ttl_s)
        ]
        for member in dead:
            self._view.drop(member)
        if dead:
            await self._redis.srem(keys.instances(), *dead)
        self.replicas = max(sum(1 for up in alive if up), 1)
        known = self._view.instances() | {self.instance}
        await self._restore(
            [m for m, up in zip(members, alive, strict=True) if up and m not in known]
        )

    async def _restore(self, missing: list[str]) -> None:
        """Read live replicas that the view lacks back from their load hashes."""
        if not missing:
            return
        pipe = self._redis.pipeline(transaction=False)
        for member in missing:
            pipe.hgetall(self._keys.load(member))
        for member, raw in zip(missing, await pipe.execute(), strict=True):
            counts, seq = load_counts(raw)
            # The reader may have taken an entry of it meanwhile (and resynced): it is
            # accounted for then, and this older hash must not overwrite it.
            if seq is not None and member not in self._view.seq:
                self._view.replace(member, counts, seq)

    async def leave(self) -> None:
        """A clean shutdown: our load vanishes at once rather than after the TTL."""
        keys = self._keys
        pipe = self._redis.pipeline(transaction=False)
        pipe.delete(keys.heartbeat(self.instance), keys.load(self.instance))
        pipe.srem(keys.instances(), self.instance)
        await pipe.execute()

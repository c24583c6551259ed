"""The provider blacklist in Redis: every replica's cool-downs, one readable key per provider.

Each cooled provider is a hash at `Keys.blacklist(provider)` (reason, detail, count,
first_seen, last_seen, instance) whose TTL is the cool-down left; docs/redis.md has the
operator recipes. `SharedBlacklist` keeps one replica's `ProviderHealth` and those keys in
step: it writes the replica's own reports, adopts the other replicas' and forgets a cool-down
whose key an operator deleted. Reading the keys, and the CLI's `list_blacklist` and
`clear_blacklist`, are `blacklist_keys`'.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Collection

from redis.exceptions import ResponseError

from kinference.cluster.blacklist_keys import (
    Entry,
    as_text,
    entries,
    epoch_time,
    iso_time,
    queue_reads,
    scan_providers,
)
from kinference.cluster.connection import RedisClient, wrong_type
from kinference.cluster.keys import Keys
from kinference.routing.health import Cooldown, ProviderHealth

log = logging.getLogger(__name__)

SCAN_EVERY = 4  # syncs between SCANs for keys of providers the caller did not name

# Extend, never shorten (Redis 6.2 has no PEXPIRE GT). Counts add up across replicas, never
# below the writer's own count; first/last seen only widen (ISO-8601 UTC strings of one width
# order like the times they name). The longest-lasting report names reason, detail and
# instance. A key without a TTL (PTTL -1) was set by hand to last: it keeps lasting.
# ARGV: reason, detail, new reports, writer's count, first_seen, last_seen, instance, ttl ms.
_WRITE = """
local key = KEYS[1]
local ttl = tonumber(ARGV[8])
local old = redis.call('PTTL', key)
local count = (tonumber(redis.call('HGET', key, 'count')) or 0) + tonumber(ARGV[3])
count = math.max(count, tonumber(ARGV[4]))
redis.call('HSET', key, 'count', count)
local first = redis.call('HGET', key, 'first_seen')
if not first or ARGV[5] < first then redis.call('HSET', key, 'first_seen', ARGV[5]) end
local last = redis.call('HGET', key, 'last_seen')
if not last or ARGV[6] > last then redis.call('HSET', key, 'last_seen', ARGV[6]) end
if old ~= -1 and old < ttl then
  redis.call('HSET', key, 'reason', ARGV[1], 'detail', ARGV[2], 'instance', ARGV[7])
  redis.call('PEXPIRE', key, ttl)
end
return count
"""
# The id of the Redis process holding the keys (a key routes the script to their node on a
# Cluster): a new id means Redis restarted or failed over and may have lost keys.
_SERVER_ID = "return string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')"


class SharedBlacklist:
    """One replica's side of the blacklist; attaches itself as `health.listener`.

    The composition root loops `await wait(0.25)` then `await sync_once(providers)` (retrying
    with backoff when it raises), announces the providers `sync_once` returns on the events
    stream, and calls `refresh(provider)` when another replica announces one.
    """

    def __init__(
        self, redis: RedisClient, keys: Keys, health: ProviderHealth, *, instance: str
    ) -> None:
        self.instance = instance
        self._redis = redis
        self._keys = keys
        self._health = health
        self._script = redis.register_script(_WRITE)
        self._pending: dict[str, int] = {}  # provider -> reports its key does not count yet
        self._server: str | None = None  # run_id of the Redis process last polled
        self._syncs = 0
        self._scanned: set[str] = set()
        self._wake = asyncio.Event()
        health.listener = self.queue

    def queue(self, provider: str, cooldown: Cooldown) -> None:
        """The health listener: a new or extended cool-down, to be written by `sync_once`."""
        del cooldown  # read again when written: it may change before then
        self._pending[provider] = self._pending.get(provider, 0) + 1
        self._wake.set()

    async def wait(self, timeout_s: float) -> None:
        """Sleep up to `timeout_s` seconds, less when a cool-down is queued."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._wake.wait()
        self._wake.clear()

    async def sync_once(self, providers: Collection[str]) -> list[str]:
        """Write queued cool-downs, then adopt or clear `providers` (and the other providers
        with keys, found by a SCAN every SCAN_EVERY syncs) from their keys.

        Returns the providers written, for the caller to announce. Raises RedisError or
        OSError when Redis fails; what was not written stays queued for the next call.
        """
        written = await self._write_pending()
        if self._syncs % SCAN_EVERY == 0:
            self._scanned = await scan_providers(self._redis, self._keys)
        self._syncs += 1
        polled = {*providers, *self._scanned, *self._health.active()}
        if polled:  # none: nothing to read (an idle gateway of self-hosted engines)
            await self._poll(polled)
        return written

    async def refresh(self, provider: str) -> None:
        """Read one provider's key now (another replica just blacklisted it)."""
        await self._poll([provider])

    async def _write_pending(self) -> list[str]:
        batch, self._pending = self._pending, {}
        written: list[str] = []
        try:
            for provider, reports in list(batch.items()):
                cooldown = self._health.cooled(provider)
                if cooldown is not None and await self._write(provider, cooldown, reports):
                    written.append(provider)
                del batch[provider]
        finally:
            for provider, reports in batch.items():  # not written: next time
                self._pending[provider] = self._pending.get(provider, 0) + reports
        return written

    async def _write(self, provider: str, cooldown: Cooldown, reports: int) -> bool:
        ttl_ms = math.ceil(cooldown.remaining(self._health.now()) * 1000)
        if ttl_ms <= 0:
            return False
        args: list[str | int] = [
            cooldown.reason,
            cooldown.detail,
            reports,
            cooldown.count,
            iso_time(cooldown.first_seen),
            iso_time(cooldown.last_seen),
            self.instance,
            ttl_ms,
        ]
        try:
            await self._script(keys=[self._keys.blacklist(provider)], args=args)
        except (
            ResponseError
        ) as exc:  # its key is not a hash (see `blacklist_keys.entries`): not shared
            if not wrong_type(exc):
                raise
            log.warning("blacklist key of %s is not a hash; cool-down not shared", provider)
            return False
        if provider not in self._pending:  # not reported again while this write was under way
            self._health.mark_published(provider, cooldown)
        return True

    async def _poll(self, providers: Collection[str]) -> None:
        ordered = sorted(providers)
        pipe = self._redis.pipeline(transaction=False)
        pipe.eval(_SERVER_ID, 1, self._keys.blacklist(""))  # the key routes it on a Cluster
        queue_reads(pipe, self._keys, ordered)
        replies = await pipe.execute(raise_on_error=False)
        # No INFO (renamed away, not in the ACL): no restart is seen, the keys are still read.
        server = None if isinstance(replies[0], ResponseError) else replies[0]
        if isinstance(server, Exception):  # (it read as Redis unavailable: Picks DEGRADED)
            raise server
        # After a restart a missing key was lost, not cleared; a key found is real (written
        # since: another replica's announcement, read by `refresh`), adopted all the same.
        restarted = server is not None and self._restarted(as_text(server))
        for provider, entry in zip(ordered, entries(ordered, replies[1:]), strict=True):
            if entry is not None:
                self._adopt(entry)
            elif not restarted:
                self._health.clear_published(provider)

    def _restarted(self, server: str) -> bool:
        """A new Redis process (restart, failover) may have lost keys: write every cool-down
        again before a missing key may clear one."""
        known, self._server = self._server, server
        if known is None or known == server:
            return False
        for provider in self._health.unpublish_all():
            self._pending.setdefault(provider, 0)
        self._wake.set()
        return True

    def _adopt(self, entry: Entry) -> None:
        health = self._health
        # A key set by hand without a TTL holds for as long as it exists: re-adopted each poll.
        remaining_s = entry.ttl_ms / 1000 if entry.ttl_ms >= 0 else health.policy.max_cooldown_s
        wall = health.wall()  # stands in for a time that cannot be read
        health.adopt(
            entry.provider,
            entry.reason,
            entry.detail,
            count=entry.count,
            first_seen=epoch_time(entry.first_seen, wall),
            last_seen=epoch_time(entry.last_seen, wall),
            remaining_s=remaining_s,
        )

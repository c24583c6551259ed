"""Keeps the precise caches and the event subscriptions in line with the policy in force.

For every pool in precise mode: a `PoolCaches` (kept across reloads while its block size
holds) and, for every endpoint, a feed subscribed to the address its `events` pattern gives
that endpoint. An endpoint that leaves the pool, or whose address changes, has its feed
stopped and its blocks forgotten.
"""

from __future__ import annotations

from kinference.config import Policy, Pool, address_for
from kinference.kvcache.pool import PoolCaches
from kinference.kvcache.precise import PreciseCaches
from kinference.kvevents.replay import ReplayLimits
from kinference.kvevents.subscriber import EventSubscriber, Feed
from kinference.kvevents.telemetry import PreciseMetrics
from kinference.kvevents.trust import WorkerTrust
from kinference.routing import WorkerTable

_Wanted = tuple[str, str, str | None, bytes]  # endpoint, address, replay address, topic


class PreciseEvents:
    """The subscriptions of one replica; `start` once the loop runs."""

    def __init__(
        self,
        caches: PreciseCaches,
        table: WorkerTable,
        metrics: PreciseMetrics,
        limits: ReplayLimits | None = None,
    ) -> None:
        self.caches = caches
        self.table = table
        self.metrics = metrics
        self.limits = limits
        self.subscriber: EventSubscriber | None = None
        self._policy: Policy | None = None
        self._feeds: dict[tuple[str, int], _Wanted] = {}

    async def start(self, policy: Policy) -> None:
        self.subscriber = EventSubscriber(
            self.caches.clock, self.metrics.message, self.limits, on_reopen=self.metrics.reopen
        )
        self.apply_policy(policy)

    def apply_policy(self, policy: Policy) -> None:
        self._policy = policy
        if self.subscriber is not None:
            self._sync(policy, self.subscriber)

    def _sync(self, policy: Policy, subscriber: EventSubscriber) -> None:
        precise = [pool for pool in policy.pools if pool.prefix.mode == "precise"]
        for ref in set(self.caches.pools) - {pool.ref for pool in precise}:
            del self.caches.pools[ref]
        wanted: dict[tuple[str, int], tuple[Pool, _Wanted]] = {}
        for pool in precise:
            caches = self.caches.pools.get(pool.ref)
            if caches is None or caches.block_size != pool.prefix.block_size:
                for key in [key for key in self._feeds if key[0] == pool.ref]:
                    self._stop(subscriber, key)
                self.caches.pools[pool.ref] = PoolCaches(
                    pool.ref, pool.prefix.block_size, clock=self.caches.clock
                )
            for endpoint in pool.endpoints:
                wanted[(pool.ref, self.table.slot(endpoint))] = (pool, _address(pool, endpoint))
        for key in set(self._feeds) - set(wanted):
            self._stop(subscriber, key)
        for key, (pool, target) in wanted.items():
            if self._feeds.get(key) != target or key not in subscriber.feeds:
                self._stop(subscriber, key)
                self._start(subscriber, key, pool, target)

    def _start(
        self, subscriber: EventSubscriber, key: tuple[str, int], pool: Pool, target: _Wanted
    ) -> None:
        ref, slot = key
        caches = self.caches.pools[ref]
        endpoint, address, replay, topic = target
        trust = WorkerTrust(
            pool.prefix.stall_after_s,
            pool.prefix.resync_after_s,
            can_replay=replay is not None,
            max_lag_s=pool.prefix.max_lag_s,
        )
        caches.trust[slot], caches.endpoints[slot] = trust, endpoint
        subscriber.add(Feed(caches, slot, endpoint, address, replay, topic, trust))
        self._feeds[key] = target

    def _stop(self, subscriber: EventSubscriber, key: tuple[str, int]) -> None:
        ref, slot = key
        subscriber.remove(ref, slot)
        self._feeds.pop(key, None)
        caches = self.caches.pools.get(ref)
        if caches is not None:
            caches.trust.pop(slot, None)
            caches.endpoints.pop(slot, None)
            caches.forget(slot)

    async def aclose(self) -> None:
        if self.subscriber is not None:
            await self.subscriber.aclose()
            self.subscriber = None
        self._feeds.clear()


def _address(pool: Pool, endpoint: str) -> _Wanted:
    config = pool.prefix
    assert config.events is not None  # validated for mode precise
    replay = address_for(config.replay, endpoint) if config.replay else None
    return (endpoint, address_for(config.events, endpoint), replay, config.topic.encode())

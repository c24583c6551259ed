"""Builds a replica's cluster layer from the settings; the composition root calls this."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from redis.exceptions import RedisError

from kinference.cluster.blacklist import SharedBlacklist
from kinference.cluster.connection import RedisClient, Timeouts, connect
from kinference.cluster.keys import Keys
from kinference.cluster.leader import ScrapeLeadership
from kinference.cluster.leases import LeasedBudget
from kinference.cluster.node import ClusterNode, new_instance_id
from kinference.cluster.outbox import Outbox
from kinference.cluster.readings import ReadingThrottle, refresh_after
from kinference.cluster.replication import READ_BLOCK_MS
from kinference.config.routing import EngineMetricsSettings
from kinference.routing import ProviderHealth
from kinference.routing.router import Router
from kinference.settings import Settings
from kinference.workers import EngineSnapshot

LEADERSHIP_S = 1.0  # seconds between renewals of the scrape leases (TTL: three of them)
BLACKLIST_POLL_S = 0.25  # seconds between polls of the blacklist keys (bounds a DEL's reach)


class EngineSharing:
    """Which pools this replica scrapes, and the publication of what it scraped."""

    def __init__(
        self,
        node: ClusterNode,
        on_change: Callable[[], None],
        metrics: Callable[[], EngineMetricsSettings | None] = lambda: None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._node = node
        self._metrics = metrics  # the policy's `engine_metrics` settings now (None: send all)
        self._throttle = ReadingThrottle(wall)
        self._leadership = ScrapeLeadership(node.redis, node.keys, node.instance)
        self._on_change = on_change  # the scrape targets must be recomputed
        self._pools: frozenset[str] = frozenset()  # pools that have engines to scrape
        self.led: frozenset[str] | None = None  # None: every pool (Redis unreachable)

    def set_pools(self, pools: Collection[Any]) -> None:
        """The policy's pools (at start and at each reload): those naming an engine are led."""
        self._pools = scraped_pools(pools)

    def scrapes(self, pool: str) -> bool:
        return self.led is None or pool in self.led

    async def claim(self) -> None:
        try:
            led = await self._leadership.claim(self._pools)
        except BaseException:
            self._set(None)  # we cannot know who else scrapes: scrape everything
            raise
        self._set(led)

    def _set(self, led: frozenset[str] | None) -> None:
        if led != self.led:
            self.led = led
            self._throttle.forget()
            self._on_change()

    def publish(self, endpoint: str, snapshot: EngineSnapshot | None, ready: bool) -> None:
        """Share a scrape's reading (or, unchanged and recent, not yet: `readings`)."""
        metrics = self._metrics()
        refresh_s = (
            refresh_after(metrics.stale_after_s, metrics.interval_s, metrics.timeout_s)
            if metrics
            else 0.0
        )
        scraped = _content(snapshot, ready)
        for name, content, at in self._throttle.scraped(endpoint, scraped, refresh_s):
            # "by": the scraping replica, for `kinference state`
            self._node.outbox.engine(name, {"at": at, **content, "by": self._node.instance})

    async def resign(self) -> None:
        await self._leadership.resign()


def _content(snapshot: EngineSnapshot | None, ready: bool) -> dict[str, Any]:
    reading: dict[str, Any] = {"ready": ready, "read": snapshot is not None}
    if snapshot is not None:
        reading |= {
            "waiting": snapshot.waiting,
            "running": snapshot.running,
            "kv_usage": snapshot.kv_usage,
            "adapters": sorted(snapshot.lora_adapters or ()),
            "kv_capacity_tokens": snapshot.kv_capacity_tokens,
        }
    return reading


class ProviderSharing:
    """Publishes this replica's provider cool-downs and applies the others' at once."""

    def __init__(
        self,
        node: ClusterNode,
        health: ProviderHealth,
        providers: Callable[[], Collection[str]],
    ) -> None:
        self._node = node
        self.blacklist = SharedBlacklist(node.redis, node.keys, health, instance=node.instance)
        self._providers = providers  # the providers the policy names now
        self._refreshes: set[asyncio.Task[None]] = set()

    async def sync(self) -> None:
        """Write new cool-downs (then announce them on the stream) and poll the keys."""
        await self.blacklist.wait(BLACKLIST_POLL_S)
        for provider in await self.blacklist.sync_once(self._providers()):
            self._node.outbox.cooled(provider)

    def on_remote_cooled(self, provider: str) -> None:
        """Another replica just blacklisted `provider`: read its key now, not at the poll."""
        task = asyncio.create_task(self._refresh(provider))
        self._refreshes.add(task)
        task.add_done_callback(self._refreshes.discard)

    async def _refresh(self, provider: str) -> None:
        with contextlib.suppress(RedisError, OSError):  # the next poll will catch up
            await self.blacklist.refresh(provider)


BUDGET_SYNC_S = 0.1  # seconds between lease rounds when no tenant is waiting for one
BUDGET_MIN_GAP_S = 0.01  # seconds: a tenant waiting for a lease gets one this soon
BUDGET_IDLE_S = 5.0  # seconds between lease rounds with no tenant, nothing unsent (`idle`)


@dataclass(frozen=True, slots=True)
class Clients:
    """A replica's Redis clients (commands, and blocking stream reads), key schema and id."""

    redis: RedisClient
    reader: RedisClient
    keys: Keys
    instance: str


def connect_clients(settings: Settings) -> Clients:
    timeouts = Timeouts(connect_s=settings.redis_timeout_s, command_s=settings.redis_timeout_s)
    return Clients(
        redis=connect(settings.redis_url, timeouts, tls=settings.redis_tls()),
        reader=connect(
            settings.redis_url, timeouts, block_s=READ_BLOCK_MS / 1000, tls=settings.redis_tls()
        ),
        keys=Keys(settings.redis_prefix, settings.redis_layout),
        instance=new_instance_id(),
    )


class LeaseLoop(NamedTuple):
    """Tenant budgets leased from Redis, and the background step that keeps them topped up."""

    budget: LeasedBudget
    step: Callable[[], Awaitable[None]]

    def lost(self) -> None:
        """Another loop found Redis failing (`ClusterNode`'s `on_lost`): an idle lease loop
        sends nothing, so this is how the budget learns it (its rounds PING until Redis
        answers; meanwhile a tenant without leases gets the offline share)."""
        self.budget.set_connected(False)


def leased_budget(clients: Clients, replicas: Callable[[], int], settings: Settings) -> LeaseLoop:
    """The tenant budgets and their lease step (`tenant_budget_offline`,
    `tenant_budget_expected_replicas` from `settings`)."""
    budget = LeasedBudget(
        clients.redis,
        clients.keys,
        replicas=replicas,
        instance=clients.instance,
        fail_closed=settings.tenant_budget_offline == "closed",
        expected_replicas=settings.tenant_budget_expected_replicas,
    )

    async def sync() -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(BUDGET_IDLE_S if budget.idle else BUDGET_SYNC_S):
                await budget.wakeup.wait()
        await budget.sync_once()

    return LeaseLoop(budget, sync)


def build_node(
    settings: Settings,
    *,
    clients: Clients,
    router: Router,
    on_cooled: Callable[[str], None],
    outbox: Outbox,
    own_load: Callable[[], Mapping[str, int]],
    pools: Callable[[], Collection[Any]] = tuple,
    on_lost: Callable[[], None] = lambda: None,
) -> ClusterNode:
    return ClusterNode(
        redis=clients.redis,
        reader_redis=clients.reader,
        keys=clients.keys,
        router=router,
        on_cooled=on_cooled,
        pools=lambda: pool_endpoints(pools()),
        outbox=outbox,
        own_load=own_load,
        stale_after_s=settings.redis_stale_after_s,
        batch_s=settings.redis_batch_ms / 1000,
        stream_maxlen=settings.redis_stream_maxlen,
        instance=clients.instance,
        on_lost=on_lost,
    )


def pool_endpoints(pools: Collection[Any]) -> dict[str, tuple[str, ...]]:
    """Pool ref -> its endpoints: the shards a replica publishes to and reads."""
    return {pool.ref: tuple(pool.endpoints) for pool in pools}


def scraped_pools(pools: Collection[Any]) -> frozenset[str]:
    """Refs of the pools whose engines are scraped."""
    return frozenset(pool.ref for pool in pools if pool.engine != "none")

"""Engine readings into the routing core: the scraper of the engines' metrics pages, the
endpoints it scrapes (in a cluster, only those of the pools this replica leads while Redis
answers), and each reading handed to the Router and published to the other replicas.

Built by the composition root (`kinference.app`), which owns its lifecycle.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry

from kinference.cluster.setup import EngineSharing
from kinference.config import Policy
from kinference.routing import Router
from kinference.routing.features import EngineReading
from kinference.workers import EngineScraper, EngineSnapshot, LeanPages


class EngineFeed:
    """The engines' readings for one replica; `apply_policy` follows reloads."""

    def __init__(self, policy: Policy, router: Router, registry: CollectorRegistry) -> None:
        self._router = router
        self._policy = policy
        self._sharing: EngineSharing | None = None
        # One keep-alive connection per endpoint; scrapes never go through a proxy.
        self._pages = LeanPages()
        self.scraper = _engine_scraper(policy, self._pages, registry, self._on_update)
        self.retarget()

    def share(self, sharing: EngineSharing) -> None:
        """Scrape only the pools `sharing` leads, and publish what is scraped."""
        self._sharing = sharing
        sharing.set_pools(self._policy.pools)
        self.retarget()

    def apply_policy(self, policy: Policy) -> None:
        self._policy = policy
        if self._sharing is not None:
            self._sharing.set_pools(policy.pools)
        self.retarget()

    def retarget(self) -> None:
        """Recompute the scraped endpoints (a reload, or a change of the pools led)."""
        self.scraper.set_targets(self._targets())

    async def start(self) -> None:
        await self.scraper.start()

    async def aclose(self) -> None:
        await self.scraper.aclose()
        await self._pages.aclose()

    def _targets(self) -> dict[str, tuple[str, str | None]]:
        """Endpoints whose engine metrics this replica scrapes: those of pools naming an
        engine (in a cluster, only the pools it leads while Redis answers)."""
        sharing = self._sharing
        return {
            endpoint: (pool.engine, pool.metrics_target(endpoint))
            for pool in self._policy.pools
            if pool.engine != "none" and (sharing is None or sharing.scrapes(pool.ref))
            for endpoint in pool.endpoints
        }

    def _on_update(self, endpoint: str, snapshot: EngineSnapshot | None) -> None:
        # An endpoint no longer scraped (its pool dropped `engine`) is a static endpoint
        # again: ready, with unknown metrics.
        scraped = endpoint in self.scraper.endpoints
        ready = self.scraper.ready(endpoint) if scraped else True
        if self._sharing is not None and scraped:
            self._sharing.publish(endpoint, snapshot, ready)
        reading = None
        if snapshot is not None:
            reading = EngineReading(
                waiting=snapshot.waiting,
                running=snapshot.running,
                kv_usage=snapshot.kv_usage,
                adapters=snapshot.lora_adapters or frozenset(),
                scraped_at=snapshot.scraped_at,
                kv_capacity_tokens=snapshot.kv_capacity_tokens,
            )
        self._router.engine_reading(endpoint, ready, reading)


def _engine_scraper(
    policy: Policy,
    client: LeanPages,
    registry: CollectorRegistry,
    on_update: Callable[[str, EngineSnapshot | None], None],
) -> EngineScraper:
    settings = policy.routing.engine_metrics
    return EngineScraper(
        client,
        interval_s=settings.interval_s,
        timeout_s=settings.timeout_s,
        stale_after_s=settings.stale_after_s,
        failures_before_unready=settings.failures_before_unready,
        registry=registry,
        on_update=on_update,
    )

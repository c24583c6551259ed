"""Kubernetes discovery: the InferencePools of one namespace and the ready pods of each.

One reflector watches the InferencePools; each pool gets a reflector of its own on the
pods its selector matches (`labelSelector`), replaced when the selector changes and
stopped when the pool goes. After every change the pools found, with their endpoints, are
handed to `on_change` (the `PolicySource`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kinference.discovery.api import Collection, KubeApi
from kinference.discovery.pools import (
    DiscoveredPool,
    PoolSpec,
    endpoints,
    pods_path,
    pools_path,
    read_pool,
)
from kinference.discovery.watch import Reflector, WatchStats, WatchTiming
from kinference.tasks import cancel_and_wait

log = logging.getLogger(__name__)


@dataclass
class _PodWatch:
    """The pods of one pool's selector, and the task keeping them current."""

    selector: str
    reflector: Reflector
    task: asyncio.Task[None]


class KubernetesDiscovery:
    """Watches InferencePools and their pods; reports the pools found after each change."""

    def __init__(
        self,
        api: KubeApi,
        on_change: Callable[[Mapping[str, DiscoveredPool]], None],
        timing: WatchTiming,
    ) -> None:
        self.api = api
        self.timing = timing
        self.pool_stats = WatchStats()
        self.pod_stats = WatchStats()
        self.pool_reflector = Reflector(
            api, Collection(pools_path(api.namespace)), self._pools_changed, timing, self.pool_stats
        )
        self.specs: dict[str, PoolSpec] = {}  # by pool name
        self.pod_watches: dict[str, _PodWatch] = {}  # by pool name
        self.pools: dict[str, DiscoveredPool] = {}  # by `namespace/name`, as last reported
        self._on_change = on_change
        self._task: asyncio.Task[None] | None = None
        self._retired: set[asyncio.Task[None]] = set()  # cancelled pod watches, ending

    async def start(self, sync_timeout_s: float) -> bool:
        """Start watching; wait up to `sync_timeout_s` for the pools and their pods to be
        listed. Returns whether they were (if not, they arrive when the API answers)."""
        self._task = asyncio.create_task(self.pool_reflector.run(), name="discovery-pools")
        try:
            async with asyncio.timeout(sync_timeout_s):
                await self.pool_reflector.synced.wait()
                for watch in list(self.pod_watches.values()):
                    await watch.reflector.synced.wait()
        except TimeoutError:
            log.warning(
                "Kubernetes discovery: not listed within %g s; serving the policy file's pools",
                sync_timeout_s,
            )
            return False
        return True

    async def aclose(self) -> None:
        """Stop every watch and close the connection (idempotent)."""
        tasks = [w.task for w in self.pod_watches.values()] + list(self._retired)
        if self._task is not None:
            tasks.append(self._task)
        self._task = None
        self.pod_watches.clear()
        await cancel_and_wait(*tasks)
        await self.api.aclose()

    def _pools_changed(self) -> None:
        namespace = self.api.namespace
        specs = {
            name: spec
            for name, obj in self.pool_reflector.objects.items()
            if (spec := read_pool(obj, namespace)) is not None
        }
        for name in self.pool_reflector.objects.keys() - specs.keys():
            log.warning("InferencePool %s/%s has no selector or port; ignored", namespace, name)
        for name in self.pod_watches.keys() - specs.keys():
            self._retire(self.pod_watches.pop(name))
        for name, spec in specs.items():
            watch = self.pod_watches.get(name)
            if watch is None or watch.selector != spec.label_selector:
                if watch is not None:
                    self._retire(watch)
                self.pod_watches[name] = self._watch_pods(name, spec.label_selector)
        self.specs = specs
        self._report()

    def _watch_pods(self, pool: str, selector: str) -> _PodWatch:
        collection = Collection(pods_path(self.api.namespace), label_selector=selector)
        reflector = Reflector(self.api, collection, self._report, self.timing, self.pod_stats)
        task = asyncio.create_task(reflector.run(), name=f"discovery-pods-{pool}")
        return _PodWatch(selector, reflector, task)

    def _retire(self, watch: _PodWatch) -> None:
        watch.task.cancel()
        self._retired.add(watch.task)
        watch.task.add_done_callback(self._retired.discard)

    def _report(self) -> None:
        pools: dict[str, DiscoveredPool] = {}
        for name, spec in self.specs.items():
            watch = self.pod_watches[name]
            if watch.reflector.synced.is_set():
                found = endpoints(spec, watch.reflector.objects.values())
            else:  # its pods are being listed again (new selector): keep what was known
                known = self.pools.get(spec.ref)
                found = known.endpoints if known is not None else ()
            pools[spec.ref] = DiscoveredPool(spec, found)
        self.pools = pools
        self._on_change(pools)

"""The composition root: builds every component once and runs the server's lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
import time
from collections.abc import Callable
from typing import Any

from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer
from prometheus_client import CollectorRegistry
from redis.exceptions import RedisError

from kinference.api.server import build_server
from kinference.api.servicer import PickerServicer
from kinference.api.session import SessionServicer
from kinference.api.session_requests import Limits as SessionLimits
from kinference.api.tls import bind, listener_files
from kinference.bodies import ByteBudget
from kinference.cluster.node import ClusterNode
from kinference.cluster.outbox import Outbox
from kinference.cluster.setup import (
    BUDGET_MIN_GAP_S,
    LEADERSHIP_S,
    Clients,
    EngineSharing,
    LeaseLoop,
    ProviderSharing,
    build_node,
    connect_clients,
    leased_budget,
)
from kinference.cluster.telemetry import ClusterCollector
from kinference.config import Policy, PolicyWatcher
from kinference.discovery import build_discovery
from kinference.engine_feed import EngineFeed
from kinference.heap import idle_blocks_returned, kept_block_bytes, start_serving
from kinference.kvcache.precise import PreciseCaches
from kinference.kvevents.optional import precise_parts
from kinference.loop_lag import LoopLagMonitor
from kinference.metrics import Metrics, serve_metrics
from kinference.ops.recorder import RequestRecorder
from kinference.ops.routing_collector import RoutingCollector
from kinference.ops.tenants import TenantLabels
from kinference.requests.offload import Offload, scanned_store
from kinference.routing import (
    InFlight,
    PrefixIndex,
    ProviderHealth,
    Router,
    TenantGate,
    WorkerTable,
)
from kinference.routing.policy import cooldowns_of
from kinference.service import PickerService
from kinference.settings import Settings, format_host_port, split_host_port
from kinference.tasks import cancel_and_wait

log = logging.getLogger(__name__)

_DRAIN_POLL_S = 0.02  # how often a draining instance checks whether its bodies are gone
_SERVING = health_pb2.HealthCheckResponse.SERVING


class App:
    """One picker instance: body store, routing core, gRPC server and metrics endpoint."""

    def __init__(
        self,
        settings: Settings,
        policy: Policy,
        registry: CollectorRegistry,
        *,
        offload: Offload | None = None,
    ) -> None:
        """`offload`: the parse worker (a new one by default), started and closed here."""
        self.settings = settings
        self.metrics = Metrics(registry)
        budget = ByteBudget(settings.max_buffered_bytes)
        self.store = scanned_store(
            budget, max_body_bytes=settings.max_body_bytes, ttl_s=settings.body_ttl_s
        )
        self.table = WorkerTable()
        self.outbox = Outbox() if settings.redis_url else None
        self.precise = PreciseCaches()  # pools in precise prefix mode, fed by KV events
        self.precise_events, self.preparer = precise_parts(
            self.metrics.registry, self.precise, self.table, policy, settings
        )
        self.cluster: ClusterNode | None = None
        self.sharing: EngineSharing | None = None
        self._providers: ProviderSharing | None = None
        clients = connect_clients(settings) if self.outbox is not None else None
        leases = leased_budget(clients, self._replicas, settings) if clients else None
        self.inflight = InFlight(
            self.table,
            settings.request_ttl_s,
            journal=self.outbox,
            released=self.precise.released,
        )
        self.router = Router(
            policy,
            table=self.table,
            prefix=PrefixIndex(policy.routing.prefix.lru_blocks_per_worker),
            health=ProviderHealth(cooldowns_of(policy)),
            tenants=TenantGate(budget=leases.budget if leases else None),
            rng=random.Random(),
            journal=self.outbox,
            precise=self.precise,
        )
        self.engines = EngineFeed(policy, self.router, self.metrics.registry)
        self.policy = policy
        if self.outbox is not None and clients is not None and leases is not None:
            self._build_cluster(self.outbox, clients, leases)
        # With discovery, the file's policy is merged with the discovered pools first.
        self.discovery = build_discovery(settings, policy, self.apply_policy, registry)
        self.watcher: PolicyWatcher | None = None
        if settings.config:
            on_file = self.discovery.source.set_file_policy if self.discovery else self.apply_policy
            self.watcher = PolicyWatcher(
                settings.config, on_file, registry=registry, current=policy
            )
        self.service = PickerService(
            self.store,
            self.router,
            self.inflight,
            self.metrics,
            shared_gap=self.cluster.gap if self.cluster is not None else lambda: None,
            recorder=RequestRecorder(self.metrics, TenantLabels(settings.metrics_max_tenants)),
            offload=offload or Offload(),
            preparer=self.preparer,
        )
        self.health = HealthServicer()
        servicer = PickerServicer(self.service, self.metrics, settings.body_idle_timeout_s)
        self.session = SessionServicer(self.service, self.metrics, SessionLimits.of(settings))
        self.server = build_server(
            servicer,
            self.health,
            max_concurrent_streams=settings.max_concurrent_streams,
            session=self.session,
        )
        self.metrics.watch_buffers(
            budget.limit, lambda: budget.used, lambda: self.store.held_bodies
        )
        self.metrics.watch_sessions(
            lambda: self.session.streams, lambda: self.session.open_requests
        )
        self.metrics.watch_inflight(self.inflight.per_endpoint, lambda: self.inflight.own)
        self.metrics.watch_heap(kept_block_bytes)
        self.metrics.watch_providers(self.router.health.active, self.router.health.now)
        self.metrics.registry.register(RoutingCollector(self.router))
        self.loop_lag = LoopLagMonitor(self.metrics.registry)
        self.port = 0
        self.metrics_port = 0
        self._metrics_server: Any = None
        self._reaper: asyncio.Task[None] | None = None

    def _build_cluster(self, outbox: Outbox, clients: Clients, leases: LeaseLoop) -> None:
        self.cluster = build_node(
            self.settings,
            clients=clients,
            router=self.router,
            on_cooled=self._remote_cooled,
            outbox=outbox,
            own_load=lambda: self.inflight.own,
            pools=lambda: self.policy.pools,  # read again each second: reloads open shards
            on_lost=leases.lost,  # the lease loop sends nothing while idle
        )
        self.sharing = EngineSharing(
            self.cluster, self.engines.retarget, lambda: self.policy.routing.engine_metrics
        )
        self.engines.share(self.sharing)
        self.cluster.add_loop("leadership", self.sharing.claim, LEADERSHIP_S)
        self._providers = ProviderSharing(
            self.cluster, self.router.health, lambda: [p.ref for p in self.policy.providers]
        )
        self.cluster.add_loop("blacklist", self._providers.sync, 0.0)
        self.cluster.add_loop("budgets", leases.step, BUDGET_MIN_GAP_S)
        self.metrics.registry.register(ClusterCollector(self.cluster))

    def _replicas(self) -> int:
        return self.cluster.replicas if self.cluster else 1

    def _remote_cooled(self, provider: str) -> None:
        """Another replica blacklisted `provider`: read its key now."""
        if self._providers is not None:
            self._providers.on_remote_cooled(provider)

    async def start(self, settled: Callable[[], None] | None = None) -> None:
        """Bind, start serving and report SERVING; `port` is the bound gRPC port. `settled`
        (kinference.heap.start_serving's freeze) runs once everything started, just before
        SERVING: callers that wait for it do not wait for the collection."""
        host, port = split_host_port(self.settings.listen)
        address = format_host_port(host, port)
        self.port = bind(self.server, address, listener_files(self.settings))
        if self.port == 0:
            raise OSError(f"cannot listen on {self.settings.listen}")
        await self.server.start()
        self._metrics_server = serve_metrics(self.settings.metrics_listen, self.metrics.registry)
        self.metrics_port = self._metrics_server.server_port if self._metrics_server else 0
        self._reaper = asyncio.create_task(self._reap_forever(), name="kinference-reaper")
        self.loop_lag.start()
        await self.engines.start()
        await self.service.offload.start()
        if self.precise_events is not None:
            await self.precise_events.start(self.policy)
        if self.preparer is not None:
            await self.preparer.warmed()  # the first Picks pay no first calls
        if self.watcher is not None:
            self.watcher.start()
        if self.discovery is not None:
            await self.discovery.start()
        if self.cluster is not None:
            await self.cluster.start(bootstrap_timeout_s=self.settings.redis_stale_after_s)
        if settled is not None:
            settled()
        await self.health.set("", _SERVING)
        await self.health.set("kinference.v1.Picker", _SERVING)
        log.info("kinference listening on %s (gRPC port %d)", self.settings.listen, self.port)

    async def _reap_forever(self) -> None:
        interval = min(1.0, self.settings.body_ttl_s / 4)  # seconds
        while True:
            await asyncio.sleep(interval)
            self.service.reap()

    async def drain_and_stop(self) -> None:
        """Graceful shutdown, bounded by KINFERENCE_SHUTDOWN_GRACE_S."""
        deadline = time.monotonic() + self.settings.shutdown_grace_s
        # 1. Tell health checks and load balancers to send new callers elsewhere.
        await self.health.enter_graceful_shutdown()
        # 2. Refuse new bodies; requests already pushed may still pick and pull.
        self.store.draining = True
        # 3. Wait for pushes, picks and pulls under way to finish, within the grace.
        while not self.service.idle and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(_DRAIN_POLL_S)
        # 4. End the PickerSession streams (each answers what it has under way first).
        self.session.close()
        # 5. Stop the server; whatever is still running after the grace is cancelled.
        await self.server.stop(max(deadline - time.monotonic(), 0.0))
        await self.close()

    def apply_policy(self, policy: Policy) -> None:
        """Switch to a reloaded policy; learned state (load, prefixes, health) carries over."""
        self.router.reload(policy)
        self.policy = policy
        self.engines.apply_policy(policy)
        if self.precise_events is not None:
            self.precise_events.apply_policy(policy)
        if self.preparer is not None:
            self.preparer.apply_policy(policy)
        log.info("policy reloaded: %d pools, %d models", len(policy.pools), len(policy.models))

    async def close(self) -> None:
        """Stop background work and the metrics endpoint (idempotent)."""
        if self.watcher is not None:
            await self.watcher.aclose()
        if self.discovery is not None:
            await self.discovery.aclose()
        if self.cluster is not None:
            await self._leave_cluster(self.cluster)
        await self.engines.aclose()
        if self.precise_events is not None:
            await self.precise_events.aclose()
        if self.preparer is not None:
            self.preparer.close()
        await self.loop_lag.aclose()
        await self.service.offload.aclose()
        reaper, self._reaper = self._reaper, None
        await cancel_and_wait(reaper)
        if self._metrics_server is not None:
            server, self._metrics_server = self._metrics_server, None
            try:  # it stops at its thread's next poll (up to 0.5 s): not on the loop
                await asyncio.to_thread(server.shutdown)
            finally:
                server.server_close()

    async def _leave_cluster(self, cluster: ClusterNode) -> None:
        self.cluster = None
        if self.sharing is not None:
            with contextlib.suppress(RedisError, OSError):
                await self.sharing.resign()
        await cluster.stop()

    async def serve(self) -> None:
        """Run until SIGTERM or SIGINT, then drain."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await start_serving(self.start)
        async with idle_blocks_returned():
            await stop.wait()
        log.info("signal received: draining for up to %gs", self.settings.shutdown_grace_s)
        await self.drain_and_stop()

"""Discovery as the composition root uses it: built from settings, started and stopped
with the app, applying the merged policy on every change."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry

from kinference.config import Policy
from kinference.discovery.api import K8sExtraMissing, client_config, connect
from kinference.discovery.kubernetes import KubernetesDiscovery
from kinference.discovery.source import PolicySource
from kinference.discovery.telemetry import DiscoveryCollector
from kinference.discovery.watch import WatchTiming
from kinference.settings import Settings, SettingsError

# How long start() waits for the first list of pools and pods before serving anyway
# (seconds): long enough for a busy API server, short enough for a readiness probe.
INITIAL_SYNC_S = 10.0


class Discovery:
    """Kubernetes discovery feeding a `PolicySource`; `source.set_file_policy` takes the
    policy file's reloads."""

    def __init__(
        self,
        settings: Settings,
        file_policy: Policy,
        apply: Callable[[Policy], None],
        registry: CollectorRegistry,
    ) -> None:
        timing = WatchTiming()
        api = connect(
            namespace=settings.discovery_namespace,
            kubeconfig=settings.discovery_kubeconfig,
            server=settings.discovery_server,
            watch_timeout_s=timing.watch_timeout_s,
        )
        self.source = PolicySource(file_policy, apply)
        self.kubernetes = KubernetesDiscovery(api, self.source.set_discovered, timing)
        registry.register(DiscoveryCollector(self.kubernetes, self.source))

    async def start(self, sync_timeout_s: float = INITIAL_SYNC_S) -> bool:
        """Start watching; True once pools and pods were listed within the timeout."""
        return await self.kubernetes.start(sync_timeout_s)

    async def aclose(self) -> None:
        await self.kubernetes.aclose()


def build_discovery(
    settings: Settings,
    file_policy: Policy,
    apply: Callable[[Policy], None],
    registry: CollectorRegistry,
) -> Discovery | None:
    """Discovery when KINFERENCE_DISCOVERY asks for it, else None."""
    if settings.discovery == "off":
        return None
    return Discovery(settings, file_policy, apply, registry)


def check_discovery(settings: Settings) -> None:
    """Fail fast before serving: SettingsError (one line) when discovery is on but the k8s
    extra is missing or the connection settings cannot be loaded."""
    if settings.discovery == "off":
        return
    try:
        client_config(kubeconfig=settings.discovery_kubeconfig, server=settings.discovery_server)
    except (K8sExtraMissing, ValueError) as exc:
        raise SettingsError(f"KINFERENCE_DISCOVERY=kubernetes: {exc}") from exc

"""The policy as the router reads it: the validated policy file plus what is derived from it
once (pool slots, scorer weights, thresholds), replaced as a whole when the file changes."""

from __future__ import annotations

from dataclasses import dataclass

from kinference.config import Policy
from kinference.routing.catalog import Catalog
from kinference.routing.health import CooldownPolicy
from kinference.routing.saturation import Saturation
from kinference.routing.scoring import Balance, Weights
from kinference.routing.table import WorkerTable


@dataclass(frozen=True, slots=True)
class PrefixSettings:
    block_bytes: int
    max_blocks: int


@dataclass(frozen=True, slots=True)
class RoutingPolicy:
    """Everything the router reads per Pick."""

    config: Policy
    catalog: Catalog
    weights: Weights
    balance: Balance
    saturation: Saturation
    prefix: PrefixSettings
    cooldowns: CooldownPolicy
    engine_stale_after_s: float  # engine readings older than this count as unknown


def compile_policy(policy: Policy, table: WorkerTable) -> RoutingPolicy:
    """Derive the router's view of a validated policy (runs on load and reload only)."""
    routing, health = policy.routing, policy.provider_health
    return RoutingPolicy(
        config=policy,
        catalog=Catalog(policy.pools, table),
        weights=Weights(**routing.weights.model_dump()),
        balance=Balance(**routing.balance.model_dump()),
        saturation=Saturation(routing.saturation.queue_depth, routing.saturation.kv_cache),
        prefix=PrefixSettings(routing.prefix.block_chars, routing.prefix.max_blocks),
        cooldowns=CooldownPolicy(
            seconds=health.cooldown_s.model_dump(),
            server_error_threshold=health.server_error_threshold,
            server_error_window_s=health.server_error_window_s,
            max_cooldown_s=health.max_cooldown_s,
        ),
        engine_stale_after_s=routing.engine_metrics.stale_after_s,
    )

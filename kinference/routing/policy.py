"""The policy as the router reads it: the validated policy file plus what is derived from it
once (pool slots, the plugin pipeline, thresholds), replaced as a whole when the file
changes. Learned state (rates, load, prefixes) lives in the router and outlives this."""

from __future__ import annotations

from dataclasses import dataclass

from kinference.config import Policy
from kinference.routing.catalog import Catalog
from kinference.routing.filters.saturation import SaturationFilter
from kinference.routing.health import CooldownPolicy
from kinference.routing.plugins.pick import MaxScorePicker
from kinference.routing.plugins.pipeline import Pipeline, PluginCosts
from kinference.routing.prefix import PrefixIndexConfig
from kinference.routing.rates import Rates
from kinference.routing.scorers.registry import build_scorers
from kinference.routing.scorers.ttft import TtftScorer
from kinference.routing.table import WorkerTable


@dataclass(frozen=True, slots=True)
class RoutingPolicy:
    """Everything the router reads per Pick."""

    config: Policy
    catalog: Catalog
    pipeline: Pipeline
    # The TTFT model, also when its weight is 0 (its estimates are then not computed).
    ttft: TtftScorer
    saturation: SaturationFilter
    prefix: PrefixIndexConfig
    cooldowns: CooldownPolicy
    engine_stale_after_s: float  # engine readings older than this count as unknown

    @property
    def predicts_ttft(self) -> bool:
        return any(scorer is self.ttft for scorer, _ in self.pipeline.scorers)


def compile_policy(
    policy: Policy, table: WorkerTable, rates: Rates | None = None, costs: PluginCosts | None = None
) -> RoutingPolicy:
    """Derive the router's view of a validated policy (runs on load and reload only)."""
    routing = policy.routing
    if rates is None:
        rates = Rates(routing.ttft)
    else:  # the router's: what it learned carries over to the reloaded priors
        rates.configure(routing.ttft)
    scorers = build_scorers(routing, rates)
    ttft = next((s for s, _ in scorers if isinstance(s, TtftScorer)), None)
    return RoutingPolicy(
        config=policy,
        catalog=Catalog(policy.pools, table),
        pipeline=Pipeline(scorers, MaxScorePicker(), PluginCosts() if costs is None else costs),
        ttft=ttft if ttft is not None else TtftScorer(routing.ttft, rates),
        saturation=SaturationFilter(routing.saturation),
        prefix=routing.prefix,
        cooldowns=cooldowns_of(policy),
        engine_stale_after_s=routing.engine_metrics.stale_after_s,
    )


def cooldowns_of(policy: Policy) -> CooldownPolicy:
    """The provider cool-downs of a policy's `provider_health:` section."""
    health = policy.provider_health
    return CooldownPolicy(
        seconds=health.cooldown_s.model_dump(),
        server_error_threshold=health.server_error_threshold,
        server_error_window_s=health.server_error_window_s,
        max_cooldown_s=health.max_cooldown_s,
    )

"""Tuning of the picker (`routing:`): scorer weights, the TTFT model, prefix index, load
balance, saturation, engine metric scrapes; and provider cool-downs (`provider_health:`).

Every key has a default, so both sections are optional and may be given in part. Each
plugin's settings are declared once, in its own module (`kinference.routing.*`), and only
composed here; the defaults follow DESIGN.md: one cost in one unit (Dynamo's KV router,
llm-d's predicted latency), 64-byte prefix blocks, LiteLLM's per-reason cool-downs.
"""

from __future__ import annotations

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from kinference.config.fields import ItemError, PolicyModel
from kinference.routing.filters.saturation import SaturationConfig
from kinference.routing.prefix import PrefixIndexConfig
from kinference.routing.scorers.prefix import BalanceConfig
from kinference.routing.scorers.ttft_config import TtftConfig


class Weights(PolicyModel):
    """Weight of each scorer, by the scorer's name (`kinference.routing.scorers`); 0 turns
    a scorer off. By default one cost decides: the estimated time to first token, which
    already holds prefix affinity (uncached prefill) and load (queue drain). The weighted
    scorers of earlier releases stay available."""

    ttft: NonNegativeFloat = 1.0  # estimated time to first token (routing.ttft)
    prefix: NonNegativeFloat = 0.0  # share of the prompt predicted cached on the worker
    queue: NonNegativeFloat = 0.0  # in-flight picks plus the engine's waiting queue
    kv_cache: NonNegativeFloat = 0.0  # engine's KV-cache utilisation
    latency: NonNegativeFloat = 0.0  # TTFT and ITL observed for the worker and model
    # The worker already has the requested adapter loaded: worth up to a third more TTFT.
    lora: NonNegativeFloat = 0.25


class EngineMetricsSettings(PolicyModel):
    """Scrapes of each endpoint's `/metrics` in pools with an `engine`."""

    interval_s: PositiveFloat = 0.2  # seconds between scrapes of one endpoint
    timeout_s: PositiveFloat = 0.5  # seconds before a scrape counts as failed
    stale_after_s: PositiveFloat = 1.0  # seconds after which metrics count as unknown
    failures_before_unready: PositiveInt = 3  # consecutive failed scrapes

    @model_validator(mode="after")
    def _stale_after_an_interval(self) -> EngineMetricsSettings:
        # Otherwise every worker's metrics would be unknown between two scrapes.
        if self.stale_after_s < self.interval_s:
            raise ItemError(
                f"stale_after_s ({self.stale_after_s}) is shorter than interval_s "
                f"({self.interval_s}): metrics would go stale between scrapes",
                "stale_after_s",
            )
        return self


class RoutingSettings(PolicyModel):
    """The `routing:` section."""

    weights: Weights = Field(default_factory=Weights)
    ttft: TtftConfig = Field(default_factory=TtftConfig)
    prefix: PrefixIndexConfig = Field(default_factory=PrefixIndexConfig)
    balance: BalanceConfig = Field(default_factory=BalanceConfig)
    saturation: SaturationConfig = Field(default_factory=SaturationConfig)
    engine_metrics: EngineMetricsSettings = Field(default_factory=EngineMetricsSettings)


class Cooldowns(PolicyModel):
    """Seconds a provider is skipped after each kind of failure."""

    backend_unresolved: PositiveFloat = 60.0  # Abort BACKEND_UNRESOLVED
    backend_unauthorized: PositiveFloat = 300.0  # Abort BACKEND_UNAUTHORIZED, upstream 401/403
    not_found: PositiveFloat = 60.0  # upstream 404 (wrong path or model)
    rate_limited: PositiveFloat = 10.0  # upstream 429
    server_error: PositiveFloat = 30.0  # upstream 5xx, past the threshold below

    def longest(self) -> tuple[str, float]:
        """The reason with the longest cool-down, and that cool-down."""
        return max(self.model_dump().items(), key=lambda item: float(item[1]))


class ProviderHealthSettings(PolicyModel):
    """The `provider_health:` section: when and for how long providers cool down."""

    cooldown_s: Cooldowns = Field(default_factory=Cooldowns)
    # 5xx first-token reports within `server_error_window_s` that start a cool-down.
    server_error_threshold: PositiveInt = 3
    server_error_window_s: PositiveFloat = 30.0
    # A repeat while cooling extends the cool-down, never beyond this many seconds.
    max_cooldown_s: PositiveFloat = 3600.0

    @model_validator(mode="after")
    def _cap_above_every_cooldown(self) -> ProviderHealthSettings:
        reason, longest = self.cooldown_s.longest()
        if self.max_cooldown_s < longest:
            raise ItemError(
                f"max_cooldown_s ({self.max_cooldown_s}) is shorter than "
                f"cooldown_s.{reason} ({longest})",
                "max_cooldown_s",
            )
        return self

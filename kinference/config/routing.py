"""Tuning of the picker: scorer weights, prefix index, load balance, saturation, engine
metric scrapes (`routing:`), and provider cool-downs (`provider_health:`).

Every key has a default, so both sections are optional and may be given in part. The
defaults follow the anchors in DESIGN.md: GIE's endpoint-picker weights (prefix 3, queue 2,
KV cache 2) and 64-character prefix blocks, sglang-router's balance override, LiteLLM's
per-reason cool-downs.
"""

from __future__ import annotations

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from kinference.config.fields import ItemError, PolicyModel


class Weights(PolicyModel):
    """Weight of each scorer in a worker's score; a weight of 0 turns the scorer off."""

    prefix: NonNegativeFloat = 3.0  # share of the prompt's prefix blocks the worker holds
    queue: NonNegativeFloat = 2.0  # in-flight picks plus the engine's waiting queue
    kv_cache: NonNegativeFloat = 2.0  # engine's KV-cache utilisation
    latency: NonNegativeFloat = 1.0  # TTFT and ITL observed for the worker and model
    lora: NonNegativeFloat = 1.0  # the worker already has the requested adapter loaded


class PrefixSettings(PolicyModel):
    """How prompts are cut into blocks for prefix-cache affinity."""

    block_chars: PositiveInt = 64  # bytes of UTF-8 prompt text per block (GIE default)
    # Blocks hashed per request: 16 KiB of leading text by default, which tells shared system
    # prompts and documents apart while hashing stays well under a millisecond.
    max_blocks: PositiveInt = 256
    lru_blocks_per_worker: PositiveInt = 50_000  # block hashes remembered per worker


class BalanceSettings(PolicyModel):
    """When load wins over cache affinity, so affinity cannot build a hot spot.

    Load is in-flight picks plus the engine's queue. The pool is imbalanced when the most
    loaded candidate has more than `abs_threshold` requests over the least loaded one AND
    more than `rel_threshold` times its load; then the least loaded candidates win.
    """

    abs_threshold: NonNegativeFloat = 16.0  # requests
    rel_threshold: float = Field(default=1.5, ge=1.0)  # ratio of most to least loaded
    # Instead of all-or-nothing: each candidate keeps 1 - excess/abs_threshold of its
    # affinity, excess being the requests it carries over the idlest candidate.
    fade: bool = False


class SaturationSettings(PolicyModel):
    """A worker is saturated when either engine signal reaches its threshold."""

    queue_depth: PositiveInt = 5  # requests waiting in the engine's queue
    kv_cache: float = Field(default=0.8, gt=0.0, le=1.0)  # fraction of KV cache in use


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
    prefix: PrefixSettings = Field(default_factory=PrefixSettings)
    balance: BalanceSettings = Field(default_factory=BalanceSettings)
    saturation: SaturationSettings = Field(default_factory=SaturationSettings)
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

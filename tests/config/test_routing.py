"""The `routing:` and `provider_health:` sections: defaults, partial overrides, errors."""

from __future__ import annotations

import pytest

from kinference.config import (
    Cooldowns,
    Policy,
    ProviderHealthSettings,
    RoutingSettings,
    parse_policy,
)
from tests.config.helpers import policy_error


def test_defaults() -> None:
    routing = Policy().routing
    weights = routing.weights
    assert weights.model_dump() == {
        "ttft": 1, "prefix": 0, "queue": 0, "kv_cache": 0, "latency": 0, "lora": 0.25,
    }  # fmt: skip
    ttft = routing.ttft
    assert (ttft.prior_prefill_tokens_per_s, ttft.prior_prefill_base_ms) == (10_000, 15)
    assert (ttft.prior_service_ms, ttft.prior_batch, ttft.decode_pressure_ms) == (2000, 8, 30)
    assert (routing.prefix.block_bytes, routing.prefix.max_blocks) == (64, 1024)
    assert routing.prefix.lru_blocks_per_worker == 50_000
    assert (routing.balance.abs_threshold, routing.balance.rel_threshold) == (16, 1.5)
    assert (routing.saturation.queue_depth, routing.saturation.kv_cache) == (5, 0.8)
    scrape = routing.engine_metrics
    assert (scrape.interval_s, scrape.timeout_s, scrape.stale_after_s) == (0.2, 0.5, 1.0)
    assert scrape.failures_before_unready == 3
    health = Policy().provider_health
    assert health.cooldown_s == Cooldowns(
        backend_unresolved=60,
        backend_unauthorized=300,
        not_found=60,
        rate_limited=10,
        server_error=30,
    )
    assert (health.server_error_threshold, health.server_error_window_s) == (3, 30)
    assert health.max_cooldown_s == 3600


def test_partial_sections_keep_the_other_defaults() -> None:
    text = """\
routing:
  weights: {prefix: 0, latency: 2.5}
  saturation: {kv_cache: 0.95}
provider_health:
  cooldown_s: {rate_limited: 1.5}
"""
    policy = parse_policy(text)
    assert policy.routing.weights.model_dump() == {
        "ttft": 1,
        "prefix": 0,
        "queue": 0,
        "kv_cache": 0,
        "latency": 2.5,
        "lora": 0.25,
    }
    assert policy.routing.saturation.model_dump() == {"queue_depth": 5, "kv_cache": 0.95}
    assert policy.routing.prefix == RoutingSettings().prefix
    assert policy.provider_health.cooldown_s.rate_limited == 1.5
    assert policy.provider_health.cooldown_s.server_error == 30


def test_every_weight_may_be_zero() -> None:
    text = "routing:\n  weights: {prefix: 0, queue: 0, kv_cache: 0, latency: 0, lora: 0}\n"
    assert parse_policy(text).routing.weights.prefix == 0


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ("weights: {queue: -0.5}", "routing.weights.queue: Input should be greater than or equal"),
        ("weights: {queue: .inf}", "routing.weights.queue: Input should be a finite number"),
        ("weights: {load: 1}", "routing.weights.load: unknown key"),
        ("prefix: {block_bytes: 0}", "routing.prefix.block_bytes: Input should be greater than 0"),
        ("prefix: {max_blocks: 1.5}", "routing.prefix.max_blocks: Input should be a valid integer"),
        ("balance: {rel_threshold: 0.9}", "routing.balance.rel_threshold: Input should be greater"),
        ("balance: {abs_threshold: -1}", "routing.balance.abs_threshold: Input should be greater"),
        ("saturation: {kv_cache: 0}", "routing.saturation.kv_cache: Input should be greater"),
        ("saturation: {kv_cache: 1.2}", "routing.saturation.kv_cache: Input should be less"),
        ("saturation: {queue_depth: 0}", "routing.saturation.queue_depth: Input should be greater"),
        ("engine_metrics: {timeout_s: 0}", "routing.engine_metrics.timeout_s: Input should be"),
        (
            "engine_metrics: {failures_before_unready: 0}",
            "routing.engine_metrics.failures_before_unready: Input should be greater",
        ),
    ],
)
def test_invalid_routing_value_is_named(section: str, problem: str) -> None:
    assert policy_error(f"routing:\n  {section}\n").startswith(f"policy.yaml:2: {problem}")


def test_stale_after_must_cover_an_interval() -> None:
    text = "routing:\n  engine_metrics:\n    interval_s: 2\n    stale_after_s: 1\n"
    assert policy_error(text) == (
        "policy.yaml:4: routing.engine_metrics.stale_after_s: stale_after_s (1.0) is shorter "
        "than interval_s (2.0): metrics would go stale between scrapes"
    )


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ("cooldown_s: {not_found: 0}", "provider_health.cooldown_s.not_found: Input should be"),
        ("cooldown_s: {timeout: 5}", "provider_health.cooldown_s.timeout: unknown key"),
        ("server_error_threshold: 0", "provider_health.server_error_threshold: Input should be"),
        ("server_error_window_s: -1", "provider_health.server_error_window_s: Input should be"),
    ],
)
def test_invalid_health_value_is_named(section: str, problem: str) -> None:
    assert policy_error(f"provider_health:\n  {section}\n").startswith(f"policy.yaml:2: {problem}")


def test_max_cooldown_must_cover_every_cooldown() -> None:
    text = "provider_health:\n  cooldown_s: {rate_limited: 5000}\n  max_cooldown_s: 4000\n"
    assert policy_error(text) == (
        "policy.yaml:3: provider_health.max_cooldown_s: max_cooldown_s (4000.0) is shorter than "
        "cooldown_s.rate_limited (5000.0)"
    )
    assert ProviderHealthSettings(max_cooldown_s=300).max_cooldown_s == 300


def test_sections_must_be_mappings() -> None:
    assert policy_error("routing: fast\n").startswith(
        "policy.yaml:1: routing: Input should be a valid dictionary"
    )

"""Pools' engine settings and providers: defaults, Azure's api_version, and errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kinference.config import DEFAULT_AZURE_API_VERSION, Policy, Provider, parse_policy
from tests.config.helpers import policy_error


def test_pool_engine_defaults_to_no_scraping() -> None:
    pool = parse_policy("pools:\n  - {name: a, endpoints: [], models: [m]}\n").pools[0]
    assert (pool.engine, pool.metrics_path) == ("none", "/metrics")


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm", "none"])
def test_pool_engines(engine: str) -> None:
    text = f"pools:\n  - {{name: a, endpoints: [], models: [m], engine: {engine}}}\n"
    assert parse_policy(text).pools[0].engine == engine


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ("engine: tgi", "pools[0].engine: Input should be 'vllm', 'sglang', 'trtllm' or 'none'"),
        ("metrics_path: metrics", "pools[0].metrics_path: expected a path starting with '/'"),
        ("metrics_path: '//x/metrics'", "pools[0].metrics_path: expected a path"),
        ("metrics_path: '/a b'", "pools[0].metrics_path: expected a path"),
        ("metrics_port: 0", "pools[0].metrics_port: Input should be greater than or equal to 1"),
        ("max_batch: 0", "pools[0].max_batch: Input should be greater than or equal to 1"),
        ("max_batch: many", "pools[0].max_batch: Input should be a valid integer"),
        ("metrics_url: 'ftp://{host}'", "pools[0].metrics_url: metrics_url must start"),
        ("metrics_url: 'http://x:1/m'", "pools[0].metrics_url: metrics_url must contain"),
        (
            "metrics_url: 'http://{host}:{port:>999999}'",
            "pools[0].metrics_url: metrics_url may contain only",
        ),
        (
            "metrics_url: 'http://{host.__class__}'",
            "pools[0].metrics_url: metrics_url may contain only",
        ),
    ],
)
def test_invalid_pool_engine_settings(extra: str, problem: str) -> None:
    text = f"pools:\n  - name: a\n    endpoints: []\n    models: [m]\n    {extra}\n"
    assert policy_error(text).startswith(f"policy.yaml:5: {problem}")


def test_metrics_apart_from_the_serving_endpoint() -> None:
    text = """\
pools:
  - {name: a, endpoints: ["10.0.0.1:8000", "[fd00::1]:8000"], models: [m], engine: trtllm,
     metrics_port: 8002}
  - {name: b, endpoints: ["w-0.dyn:9000"], models: [m], engine: vllm,
     metrics_url: "https://{host}:9091/metrics?of={port}"}
  - {name: c, endpoints: ["10.0.0.2:8000"], models: [m], engine: vllm}
"""
    a, b, c = parse_policy(text).pools
    assert a.metrics_target("10.0.0.1:8000") == "http://10.0.0.1:8002/metrics"
    assert a.metrics_target("[fd00::1]:8000") == "http://[fd00::1]:8002/metrics"
    assert b.metrics_target("w-0.dyn:9000") == "https://w-0.dyn:9091/metrics?of=9000"
    assert c.metrics_target("10.0.0.2:8000") == "/metrics"  # a path on the endpoint


def test_max_batch_is_optional_and_read_as_given() -> None:
    text = ("pools:\n  - {name: a, endpoints: [], models: [m], max_batch: 64}\n"
            "  - {name: b, endpoints: [], models: [m]}\n")  # fmt: skip
    a, b = parse_policy(text).pools
    assert (a.max_batch, b.max_batch) == (64, None)


def test_metrics_port_and_url_exclude_each_other() -> None:
    text = ("pools:\n  - {name: a, endpoints: [], models: [m], metrics_port: 8002, "
            "metrics_url: 'http://{host}:1/m'}\n")  # fmt: skip
    assert "give metrics_port or metrics_url, not both" in policy_error(text)


def test_provider_defaults() -> None:
    provider = parse_policy("providers:\n  - {name: openai, api: openai}\n").providers[0]
    assert (provider.ref, provider.api, provider.api_version) == ("default/openai", "openai", None)


def test_azure_api_version_defaults() -> None:
    text = "providers:\n  - {namespace: ai, name: azure, api: azure-openai}\n"
    assert parse_policy(text).providers[0].api_version == DEFAULT_AZURE_API_VERSION == "2024-10-21"
    assert Provider(name="a", api="azure-openai").api_version == "2024-10-21"
    assert Provider(name="a", api="azure-openai", api_version=None).api_version == "2024-10-21"


def test_azure_api_version_may_be_an_unquoted_date() -> None:
    text = "providers:\n  - {name: azure, api: azure-openai, api_version: 2025-04-01}\n"
    assert parse_policy(text).providers[0].api_version == "2025-04-01"


def test_azure_preview_api_version() -> None:
    text = "providers:\n  - {name: azure, api: azure-openai, api_version: 2025-04-01-preview}\n"
    assert parse_policy(text).providers[0].api_version == "2025-04-01-preview"


def test_api_version_is_an_error_for_other_apis() -> None:
    text = "providers:\n  - name: gemini\n    api: gemini-openai\n    api_version: '2024-10-21'\n"
    assert policy_error(text) == (
        "policy.yaml:4: providers[0].api_version: api_version applies only to "
        "api: azure-openai (this provider is gemini-openai)"
    )


@pytest.mark.parametrize(
    ("provider", "problem"),
    [
        ("{name: p, api: cohere}", "providers[0].api: Input should be 'openai', 'azure-openai'"),
        ("{name: p}", "providers[0].api: required key is missing"),
        ("{name: P, api: openai}", "providers[0].name: expected a DNS name"),
        ("{name: p, api: openai, url: x}", "providers[0].url: unknown key"),
        (
            "{name: p, api: azure-openai, api_version: 'a&b=c'}",
            "providers[0].api_version: expected letters, digits",
        ),
    ],
)
def test_invalid_provider_field_is_named(provider: str, problem: str) -> None:
    assert policy_error(f"providers:\n  - {provider}\n").startswith(f"policy.yaml:2: {problem}")


def test_duplicate_provider_points_at_the_second_one() -> None:
    text = """\
providers:
  - {namespace: ai, name: openai, api: openai}
  - {namespace: ai, name: other, api: openai}
  - {namespace: ai, name: openai, api: azure-openai}
"""
    assert policy_error(text).startswith(
        "policy.yaml:4: providers[2].name: duplicate provider 'ai/openai' (first at index 0)"
    )


def test_a_pool_and_a_provider_may_share_a_name() -> None:
    text = """\
pools: [{name: chat, endpoints: [], models: [m]}]
providers: [{name: chat, api: openai}]
"""
    policy = parse_policy(text)
    assert policy.pool("default/chat") == policy.pools[0]
    assert policy.provider("default/chat") == policy.providers[0]
    assert policy.pool("default/nope") is None and policy.provider("ai/x") is None


def test_provider_is_frozen() -> None:
    provider = Provider(name="a", api="openai")
    with pytest.raises(ValidationError):
        provider.api = "azure-openai"
    with pytest.raises(ValidationError, match="duplicate provider"):
        Policy(providers=(provider, provider))

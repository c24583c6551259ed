"""Provider paths per API and request shape, and a target's own path."""

from __future__ import annotations

import pytest

from kinference.config import (
    Provider,
    Target,
    UnsupportedShape,
    provider_path,
    supports_shape,
)

OPENAI = Provider(namespace="ai", name="openai", api="openai")
AZURE = Provider(namespace="ai", name="azure", api="azure-openai")
AZURE_PREVIEW = Provider(name="azure2", api="azure-openai", api_version="2025-04-01-preview")
ANTHROPIC = Provider(namespace="ai", name="claude", api="anthropic-openai")
GEMINI = Provider(namespace="ai", name="gemini", api="gemini-openai")


def target(provider: Provider, model: str = "m", path: str | None = None) -> Target:
    return Target(provider=provider.ref, model=model, path=path)


@pytest.mark.parametrize(
    ("provider", "shape", "path"),
    [
        (OPENAI, "chat", "/v1/chat/completions"),
        (OPENAI, "completion", "/v1/completions"),
        (OPENAI, "embeddings", "/v1/embeddings"),
        (OPENAI, "responses", "/v1/responses"),
        (AZURE, "chat", "/openai/deployments/m/chat/completions?api-version=2024-10-21"),
        (AZURE, "completion", "/openai/deployments/m/completions?api-version=2024-10-21"),
        (AZURE, "embeddings", "/openai/deployments/m/embeddings?api-version=2024-10-21"),
        (AZURE, "responses", "/openai/v1/responses"),
        (
            AZURE_PREVIEW,
            "chat",
            "/openai/deployments/m/chat/completions?api-version=2025-04-01-preview",
        ),
        (ANTHROPIC, "chat", "/v1/chat/completions"),
        (GEMINI, "chat", "/v1beta/openai/chat/completions"),
        (GEMINI, "embeddings", "/v1beta/openai/embeddings"),
    ],
)
def test_default_paths(provider: Provider, shape: str, path: str) -> None:
    assert provider_path(provider, target(provider), shape) == path
    assert supports_shape(provider, target(provider), shape)


@pytest.mark.parametrize(
    ("provider", "shape"),
    [
        (ANTHROPIC, "completion"),
        (ANTHROPIC, "embeddings"),
        (ANTHROPIC, "responses"),
        (GEMINI, "completion"),
        (GEMINI, "responses"),
        (OPENAI, "messages"),
        (AZURE, "messages"),
    ],
)
def test_unsupported_shapes(provider: Provider, shape: str) -> None:
    with pytest.raises(UnsupportedShape, match=rf"provider {provider.ref} .* no '{shape}'"):
        provider_path(provider, target(provider), shape)
    assert not supports_shape(provider, target(provider), shape)


def test_azure_deployment_is_quoted() -> None:
    path = provider_path(AZURE, target(AZURE, model="gpt 4o/x"), "chat")
    assert path == "/openai/deployments/gpt%204o%2Fx/chat/completions?api-version=2024-10-21"


@pytest.mark.parametrize("provider", [OPENAI, AZURE, ANTHROPIC, GEMINI])
@pytest.mark.parametrize("shape", ["chat", "completion", "embeddings", "responses", "messages"])
def test_target_path_wins_for_every_shape(provider: Provider, shape: str) -> None:
    own = target(provider, path="/custom/v1/chat?key=1")
    assert provider_path(provider, own, shape) == "/custom/v1/chat?key=1"
    assert supports_shape(provider, own, shape)

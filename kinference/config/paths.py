"""The path a provider target is sent to, per provider API and request shape.

The path goes in `ProviderTarget.path`: it replaces the client's path and is joined after
any path prefix of the GatewayBackend's base URL, so the GatewayBackend should carry the
bare origin (e.g. `https://generativelanguage.googleapis.com`). A target's own `path`
always wins; these defaults apply when it has none.

Sources of the defaults:
- openai: the OpenAI API reference (`/v1/chat/completions`, `/v1/completions`,
  `/v1/embeddings`, `/v1/responses`).
- azure-openai: the Azure OpenAI data-plane inference REST reference, GA 2024-10-21
  (https://learn.microsoft.com/azure/ai-foundry/openai/reference):
  `POST /openai/deployments/{deployment-id}/chat/completions?api-version=...`, and the
  same under `/completions` and `/embeddings`; the deployment is the target's `model`.
  Responses exist only on the v1 API, which takes no api-version and names the deployment
  in the body's `model` (https://learn.microsoft.com/azure/ai-foundry/openai/api-version-lifecycle):
  `POST /openai/v1/responses`.
- anthropic-openai: Anthropic's OpenAI SDK compatibility layer takes the OpenAI SDK with
  base URL `https://api.anthropic.com/v1/` and offers chat completions only
  (https://docs.anthropic.com/en/api/openai-sdk): `/v1/chat/completions`.
- anthropic: Anthropic's Messages API (https://docs.anthropic.com/en/api/messages),
  `POST /v1/messages`, for Messages requests (and chat requests translated to them).
- gemini-openai: Gemini's OpenAI compatibility, base URL
  `https://generativelanguage.googleapis.com/v1beta/openai/`
  (https://ai.google.dev/gemini-api/docs/openai): `/v1beta/openai/chat/completions` and
  `/v1beta/openai/embeddings`; no legacy completions and no responses.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import quote

from kinference.config.models import Target, TargetApi
from kinference.config.pools import DEFAULT_AZURE_API_VERSION, Provider

# The OpenAI request shapes a provider path depends on.
ShapeKind = Literal["chat", "completion", "embeddings", "responses", "messages"]

_OPENAI_PATHS = {
    "chat": "/v1/chat/completions",
    "completion": "/v1/completions",
    "embeddings": "/v1/embeddings",
    "responses": "/v1/responses",
}
_ANTHROPIC_OPENAI_PATHS = {"chat": "/v1/chat/completions"}
_ANTHROPIC_PATHS = {"messages": "/v1/messages"}
_GEMINI_PATHS = {
    "chat": "/v1beta/openai/chat/completions",
    "embeddings": "/v1beta/openai/embeddings",
}
# Per-deployment operations of Azure's dated API; `responses` is on the v1 API instead.
_AZURE_OPERATIONS = {
    "chat": "chat/completions",
    "completion": "completions",
    "embeddings": "embeddings",
}
_AZURE_RESPONSES_PATH = "/openai/v1/responses"


class UnsupportedShape(ValueError):
    """The provider's API has no endpoint for this request shape."""


def target_api(target: Target, provider: Provider | None) -> TargetApi | None:
    """The API `target` speaks: its own `api`; else None for a provider target with its own
    `path` (requests go there as written); else its provider's family, or openai."""
    if target.api is not None:
        return target.api
    if target.path is not None:
        return None
    if provider is not None and provider.api == "anthropic":
        return "anthropic"
    return "openai"


def supports_shape(provider: Provider, target: Target, shape_kind: str) -> bool:
    """Whether `provider_path` has a path for this target and shape."""
    try:
        provider_path(provider, target, shape_kind)
    except UnsupportedShape:
        return False
    return True


def provider_path(provider: Provider, target: Target, shape_kind: str) -> str:
    """The path to send a `shape_kind` request for `target` to on `provider`.

    `shape_kind` is one of "chat", "completion", "embeddings", "responses". Raises
    `UnsupportedShape` when the provider's API has no such endpoint (for example
    embeddings on anthropic-openai) and the target gives no `path` of its own.
    """
    if target.path is not None:
        return target.path
    if provider.api == "azure-openai":
        return _azure_path(provider, target.model, shape_kind)
    paths = {
        "openai": _OPENAI_PATHS,
        "anthropic-openai": _ANTHROPIC_OPENAI_PATHS,
        "anthropic": _ANTHROPIC_PATHS,
        "gemini-openai": _GEMINI_PATHS,
    }[provider.api]
    path = paths.get(shape_kind)
    if path is None:
        raise _unsupported(provider, shape_kind)
    return path


def _azure_path(provider: Provider, deployment: str, shape_kind: str) -> str:
    if shape_kind == "responses":
        return _AZURE_RESPONSES_PATH
    operation = _AZURE_OPERATIONS.get(shape_kind)
    if operation is None:
        raise _unsupported(provider, shape_kind)
    version = provider.api_version or DEFAULT_AZURE_API_VERSION
    # Deployment names are letters, digits, '-', '_' and '.'; quote anything else.
    return (
        f"/openai/deployments/{quote(deployment, safe='')}/{operation}"
        f"?api-version={quote(version, safe='')}"
    )


def _unsupported(provider: Provider, shape_kind: str) -> UnsupportedShape:
    return UnsupportedShape(
        f"provider {provider.ref} (api: {provider.api}) has no {shape_kind!r} endpoint; "
        "give the target a 'path' to send such requests anyway"
    )

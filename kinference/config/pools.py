"""Where requests can go: pools of local model servers, and off-cluster providers."""

from __future__ import annotations

import datetime
from typing import Any, Literal

from pydantic import field_validator, model_validator

from kinference.config.fields import (
    ApiPath,
    DnsLabel,
    DnsSubdomain,
    Endpoint,
    ItemError,
    ModelName,
    PolicyModel,
    Word,
    reject_duplicates,
)
from kinference.config.prefix import PrefixConfig

# The inference engine a pool runs, which decides how its `/metrics` are read;
# `none` means the endpoints are not scraped (no queue or KV-cache signal).
Engine = Literal["vllm", "sglang", "trtllm", "none"]
# The OpenAI-compatible dialect a provider speaks, which decides its default paths.
ProviderApi = Literal["openai", "azure-openai", "anthropic-openai", "gemini-openai"]

# The Azure OpenAI data-plane inference GA version documented in the REST reference
# (https://learn.microsoft.com/azure/ai-foundry/openai/reference, "2024-10-21").
DEFAULT_AZURE_API_VERSION = "2024-10-21"


class Pool(PolicyModel):
    """A set of model-server endpoints serving the same models (an InferencePool)."""

    namespace: DnsLabel = "default"
    name: DnsSubdomain
    # HOST:PORT of each model server. May be empty: a pool scaled to zero has no workers.
    endpoints: tuple[Endpoint, ...]
    # Model names as the model servers know them; at least one. Each is also routable by
    # that name without a `models:` entry.
    models: tuple[ModelName, ...]
    engine: Engine = "none"
    # Path of the engine's Prometheus endpoint on every endpoint of the pool.
    metrics_path: ApiPath = "/metrics"
    # How the workers' prefix caches are known: predicted, or from the engines' KV events.
    prefix: PrefixConfig = PrefixConfig()

    @property
    def ref(self) -> str:
        """`namespace/name`, the pool's identity across the policy and the API."""
        return f"{self.namespace}/{self.name}"

    @field_validator("endpoints")
    @classmethod
    def _unique_endpoints(cls, endpoints: tuple[str, ...]) -> tuple[str, ...]:
        reject_duplicates(endpoints, "endpoint")
        return endpoints

    @field_validator("models")
    @classmethod
    def _unique_models(cls, models: tuple[str, ...]) -> tuple[str, ...]:
        if not models:
            raise ValueError("at least one model is required")
        reject_duplicates(models, "model")
        return models


class Provider(PolicyModel):
    """An off-cluster OpenAI-compatible API, reached through a GatewayBackend.

    `namespace/name` is the `backend_ref` the caller resolves (base URL, credentials and
    TLS are the caller's); the picker only chooses it and the path to send to.
    """

    namespace: DnsLabel = "default"
    name: DnsSubdomain
    api: ProviderApi
    # Azure OpenAI's `api-version` query value; filled with the default for azure-openai.
    api_version: Word | None = None

    @property
    def ref(self) -> str:
        """`namespace/name`, as sent in `ProviderTarget.backend_ref`."""
        return f"{self.namespace}/{self.name}"

    @field_validator("api_version", mode="before")
    @classmethod
    def _date_as_text(cls, value: Any) -> Any:
        # Unquoted `2024-10-21` is a date to YAML; it means the same text here.
        return value.isoformat() if isinstance(value, datetime.date) else value

    @model_validator(mode="before")
    @classmethod
    def _default_api_version(cls, data: Any) -> Any:
        azure = isinstance(data, dict) and data.get("api") == "azure-openai"
        if azure and data.get("api_version") is None:  # absent or null
            return {**data, "api_version": DEFAULT_AZURE_API_VERSION}  # input untouched
        return data

    @model_validator(mode="after")
    def _api_version_only_for_azure(self) -> Provider:
        if self.api != "azure-openai" and self.api_version is not None:
            raise ItemError(
                f"api_version applies only to api: azure-openai (this provider is {self.api})",
                "api_version",
            )
        return self

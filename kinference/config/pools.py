"""Where requests can go: pools of local model servers, and off-cluster providers."""

from __future__ import annotations

import datetime
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

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
from kinference.config.prefix import PrefixConfig, check_ports
from kinference.hostport import split_host_port

# Requests one engine runs or queues, at most: a `max_batch` above it is a typo, an engine's
# reported running or waiting count above it a broken exporter (`workers.snapshot`).
MAX_ENGINE_REQUESTS = 1_000_000

# The inference engine a pool runs, which decides how its `/metrics` are read;
# `none` means the endpoints are not scraped (no queue or KV-cache signal).
Engine = Literal["vllm", "sglang", "trtllm", "none"]
# The API a provider speaks, which decides its default paths: an OpenAI-compatible dialect,
# or `anthropic`, Anthropic's own Messages API.
ProviderApi = Literal["openai", "azure-openai", "anthropic-openai", "gemini-openai", "anthropic"]

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
    # Engines that serve metrics apart from the serving endpoint: on another port of the
    # same host (Triton / TRT-LLM on 8002, Dynamo workers on their system port), or at a
    # URL template with `{host}` and `{port}` (the serving endpoint's) and nothing else.
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    metrics_url: str | None = Field(default=None, max_length=512)
    # How the workers' prefix caches are known: predicted, or from the engines' KV events.
    prefix: PrefixConfig = PrefixConfig()
    # Sequences each engine of the pool runs at once (vLLM's --max-num-seqs, SGLang's
    # --max-running-requests), for the TTFT model's queue and decode pressure. Unset, it
    # is learned: from the engine's readings (running while requests wait) where it is
    # scraped, and from observed TTFT (no queue at N sequences means at least N).
    max_batch: int | None = Field(default=None, ge=1, le=MAX_ENGINE_REQUESTS)

    @property
    def ref(self) -> str:
        """`namespace/name`, the pool's identity across the policy and the API."""
        return f"{self.namespace}/{self.name}"

    def metrics_target(self, endpoint: str) -> str:
        """Where the engine behind `endpoint` serves its metrics: a path on the endpoint,
        or a full URL (another port, or the template filled in)."""
        if self.metrics_url is None and self.metrics_port is None:
            return self.metrics_path
        host, port = split_host_port(endpoint)
        bracketed = f"[{host}]" if ":" in host else host
        if self.metrics_url is not None:
            return self.metrics_url.format(host=bracketed, port=port)
        return f"http://{bracketed}:{self.metrics_port}{self.metrics_path}"

    @field_validator("metrics_url")
    @classmethod
    def _url_template(cls, url: str | None) -> str | None:
        if url is None:
            return None
        if not url.startswith(("http://", "https://")):
            raise ValueError("metrics_url must start with http:// or https://")
        rest = url.replace("{host}", "").replace("{port}", "")
        if "{" in rest or "}" in rest:  # no format specs, attributes or other names
            raise ValueError("metrics_url may contain only {host} and {port}")
        if "{host}" not in url:
            raise ValueError("metrics_url must contain {host}: one URL per endpoint")
        return url

    @model_validator(mode="after")
    def _one_metrics_location(self) -> Pool:
        if self.metrics_url is not None and self.metrics_port is not None:
            raise ItemError("give metrics_port or metrics_url, not both", "metrics_url")
        return self

    @model_validator(mode="after")
    def _event_ports(self) -> Pool:
        check_ports(self.prefix, self.endpoints)
        return self

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
    """An off-cluster API (OpenAI-compatible or Anthropic's), reached through a GatewayBackend.

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

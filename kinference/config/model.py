"""The routing policy data model: what the policy file may say, and what it must not.

Every model is frozen (a loaded policy is shared read-only by the picker) and forbids
unknown keys (a misspelt key would otherwise be silently ignored). New sections such as
`providers`, `models` and `tenants` are added as new fields with empty defaults on
`Policy`, so existing policy files stay valid.

Validation problems are raised as `ValueError`; `ItemError` additionally says which item of
a list is at fault, so the loader can point at its line in the file.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, field_validator

from kinference.settings import split_host_port

# Kubernetes object names: a namespace is an RFC 1123 label, other names an RFC 1123
# subdomain (labels joined by dots), both lower case.
_DNS_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_MAX_SUBDOMAIN = 253


class ItemError(ValueError):
    """A validation problem in one item of a list field.

    `index` is appended to pydantic's error location, so the message points at the item
    (`pools[2].name`) rather than the whole list (`pools`).
    """

    def __init__(self, message: str, index: int, key: str | None = None) -> None:
        super().__init__(message)
        self.path: tuple[int | str, ...] = (index,) if key is None else (index, key)


def _dns_label(value: str) -> str:
    if not _DNS_LABEL.fullmatch(value):
        raise ValueError(
            f"expected a DNS label (lower-case letters, digits and '-', at most 63), got {value!r}"
        )
    return value


def _dns_subdomain(value: str) -> str:
    labels = value.split(".")
    if len(value) > _MAX_SUBDOMAIN or not all(_DNS_LABEL.fullmatch(part) for part in labels):
        raise ValueError(
            f"expected a DNS name (lower-case letters, digits, '-' and '.'), got {value!r}"
        )
    return value


def _endpoint(value: str) -> str:
    _host, port = split_host_port(value)
    if port == 0:  # fine for a listen address, but nothing can be reached on port 0
        raise ValueError(f"endpoint port must be 1..65535, got {value!r}")
    return value


def _model_name(value: str) -> str:
    if not value or value != value.strip():
        raise ValueError(f"expected a model name without surrounding spaces, got {value!r}")
    return value


DnsLabel = Annotated[str, AfterValidator(_dns_label)]
DnsSubdomain = Annotated[str, AfterValidator(_dns_subdomain)]
Endpoint = Annotated[str, AfterValidator(_endpoint)]
ModelName = Annotated[str, AfterValidator(_model_name)]


def reject_duplicates(items: Iterable[Hashable], what: str, key: str | None = None) -> None:
    """Raise `ItemError` at the second occurrence of any item, naming the first."""
    first_seen: dict[Hashable, int] = {}
    for index, item in enumerate(items):
        if item in first_seen:
            raise ItemError(
                f"duplicate {what} {item!r} (first at index {first_seen[item]})", index, key
            )
        first_seen[item] = index


class PolicyModel(BaseModel):
    """Base of every policy model: frozen, unknown keys are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Pool(PolicyModel):
    """A set of model-server endpoints serving the same models (an InferencePool)."""

    namespace: DnsLabel = "default"
    name: DnsSubdomain
    # HOST:PORT of each model server. May be empty: a pool scaled to zero has no workers.
    endpoints: tuple[Endpoint, ...]
    # Model names as the model servers know them; at least one.
    models: tuple[ModelName, ...]

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


class Policy(PolicyModel):
    """The whole routing policy file."""

    pools: tuple[Pool, ...] = ()

    @field_validator("pools")
    @classmethod
    def _unique_pools(cls, pools: tuple[Pool, ...]) -> tuple[Pool, ...]:
        reject_duplicates((pool.ref for pool in pools), "pool", key="name")
        return pools

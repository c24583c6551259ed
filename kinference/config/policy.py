"""The whole routing policy file, validated as one, and its look-ups for the picker.

Each section is optional, so a file with only `pools:` (the foundation's format) stays
valid. Sections validate on their own first (`pools.py`, `models.py`, `tenants.py`,
`routing.py`); then the names they use of each other are checked (`references.py`), and
the look-up tables the picker uses at Pick are built once (`index.py`).
"""

from __future__ import annotations

import functools

from pydantic import Field, PrivateAttr, field_validator, model_validator

from kinference.config.fields import ItemErrors, PolicyModel, reject_duplicates
from kinference.config.index import ModelRoute, PolicyIndex
from kinference.config.models import ModelEntry
from kinference.config.pools import Pool, Provider
from kinference.config.references import check_references
from kinference.config.routing import ProviderHealthSettings, RoutingSettings
from kinference.config.tenants import TenantAction, TenantRule


class Policy(PolicyModel):
    """The routing policy: where models are served, who may use them, how to pick.

    Treat it as read-only and replace it whole: `model_copy(update=...)` skips validation
    and would leave the look-up tables stale.
    """

    pools: tuple[Pool, ...] = ()
    providers: tuple[Provider, ...] = ()
    models: tuple[ModelEntry, ...] = ()
    # First match wins; see `tenant_rule`.
    tenants: tuple[TenantRule, ...] = ()
    default_tenant_action: TenantAction = "allow"
    routing: RoutingSettings = Field(default_factory=RoutingSettings)
    provider_health: ProviderHealthSettings = Field(default_factory=ProviderHealthSettings)

    _index: PolicyIndex = PrivateAttr()

    @functools.cached_property
    def _lookups(self) -> PolicyIndex:
        """`_index`, kept in the instance after its first read: a private attribute is read
        through pydantic's `__getattr__` (1-2 µs, an exception inside), and every Pick reads
        the index three times (model, tenant admission, tenant reservation)."""
        return self._index

    @field_validator("pools")
    @classmethod
    def _unique_pools(cls, pools: tuple[Pool, ...]) -> tuple[Pool, ...]:
        reject_duplicates((pool.ref for pool in pools), "pool", key="name")
        return pools

    @field_validator("providers")
    @classmethod
    def _unique_providers(cls, providers: tuple[Provider, ...]) -> tuple[Provider, ...]:
        reject_duplicates((provider.ref for provider in providers), "provider", key="name")
        return providers

    @model_validator(mode="after")
    def _references_resolve(self) -> Policy:
        errors = check_references(self.pools, self.providers, self.models, self.tenants)
        if errors:
            raise ItemErrors(errors)
        self._index = PolicyIndex.build(self.pools, self.providers, self.models, self.tenants)
        return self

    def resolve_model(self, name: str) -> ModelRoute | None:
        """The route for a requested model name or alias; None if nothing serves it.

        A `models:` entry's name or alias wins over a pool's model of the same name.
        """
        return self._lookups.routes.get(name)

    def tenant_rule(self, tenant: str) -> TenantRule | None:
        """The first rule matching `tenant`; None means `default_tenant_action` applies.

        `""` matches only a rule for `""`; `"*"` rules match any tenant except `""`.
        """
        return self._lookups.tenant_rule(tenant)

    def pool(self, ref: str) -> Pool | None:
        """The pool named `namespace/name`, if any."""
        return self._lookups.pools.get(ref)

    def provider(self, ref: str) -> Provider | None:
        """The provider named `namespace/name`, if any."""
        return self._lookups.providers.get(ref)

    @property
    def model_names(self) -> tuple[str, ...]:
        """Every name a client may ask for: `models:` names, aliases, pool models."""
        return tuple(self._lookups.routes)

"""The policy as the picker reads it at Pick: every look-up is one dictionary access.

Built once when a `Policy` is validated, never at Pick time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kinference.config.models import ModelEntry, Target
from kinference.config.pools import Pool, Provider
from kinference.config.tenants import ANY_NAMED_TENANT, TenantRule


@dataclass(frozen=True, slots=True)
class ModelRoute:
    """Where a requested model can go: its canonical name and its targets, in file order."""

    name: str  # the `models:` entry's name, or the pool model's name
    targets: tuple[Target, ...]
    aliases: tuple[str, ...] = ()
    # True for a model routable only because pools list it (no `models:` entry).
    implicit: bool = False
    # `targets` split by `use`, each in file order; computed here so Pick does not filter.
    primary: tuple[Target, ...] = field(init=False, repr=False, compare=False)
    overflow: tuple[Target, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        primary = tuple(target for target in self.targets if target.use == "primary")
        overflow = tuple(target for target in self.targets if target.use == "overflow")
        object.__setattr__(self, "primary", primary)  # frozen: set once, here
        object.__setattr__(self, "overflow", overflow)

    @property
    def names(self) -> tuple[str, ...]:
        """Every name that resolves to this route, canonical first."""
        return (self.name, *self.aliases)


@dataclass(frozen=True, slots=True)
class PolicyIndex:
    """Look-up tables over a validated policy."""

    routes: dict[str, ModelRoute]  # by requested name: canonical names and aliases
    pools: dict[str, Pool]  # by `namespace/name`
    providers: dict[str, Provider]  # by `namespace/name`
    # By `tenant` as written. Validation leaves at most one rule per tenant and no named
    # rule after "*", so an exact match here is always the first match in the file.
    tenants: dict[str, TenantRule]

    @classmethod
    def build(
        cls,
        pools: Sequence[Pool],
        providers: Sequence[Provider],
        models: Sequence[ModelEntry],
        tenants: Sequence[TenantRule],
    ) -> PolicyIndex:
        """Index validated sections (names are unique, references resolve)."""
        routes: dict[str, ModelRoute] = {}
        for entry in models:
            route = ModelRoute(entry.name, entry.targets, entry.aliases)
            routes.update((name, route) for name in entry.names)
        # A model pools list, and no entry claims as a name or alias, gets one primary
        # target per pool serving it, in the pools' file order.
        for name, refs in _pool_models(pools).items():
            if name not in routes:
                targets = tuple(Target(pool=ref, model=name) for ref in refs)
                routes[name] = ModelRoute(name, targets, implicit=True)
        return cls(
            routes=routes,
            pools={pool.ref: pool for pool in pools},
            providers={provider.ref: provider for provider in providers},
            tenants={rule.tenant: rule for rule in tenants},
        )

    def tenant_rule(self, tenant: str) -> TenantRule | None:
        """The first rule matching `tenant`: its own, else "*" unless `tenant` is ""."""
        rule = self.tenants.get(tenant)
        if rule is None and tenant != "":
            rule = self.tenants.get(ANY_NAMED_TENANT)
        return rule


def _pool_models(pools: Sequence[Pool]) -> dict[str, list[str]]:
    """Model name → refs of the pools listing it, both in file order."""
    served: dict[str, list[str]] = {}
    for pool in pools:
        for model in pool.models:
            served.setdefault(model, []).append(pool.ref)
    return served

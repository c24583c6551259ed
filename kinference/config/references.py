"""Checks across sections: every name the file uses must be defined somewhere in it.

Each check returns `ItemError`s whose path starts at the top of the file
(`models`, 0, `targets`, 1, `pool`), so the loader can report each at its own line.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kinference.config.fields import ItemError
from kinference.config.models import ModelEntry, Target
from kinference.config.pools import Pool, Provider
from kinference.config.tenants import TenantRule, unreachable_rules

# Known names listed in an "unknown name" error, at most; the file has the rest.
_MAX_LISTED = 5


def check_references(
    pools: Sequence[Pool],
    providers: Sequence[Provider],
    models: Sequence[ModelEntry],
    tenants: Sequence[TenantRule],
) -> list[ItemError]:
    """Every cross-reference problem in the file, in no particular order."""
    pools_by_ref = {pool.ref: pool for pool in pools}
    provider_refs = {provider.ref: provider for provider in providers}
    errors = _unique_model_names(models)
    for index, entry in enumerate(models):
        for position, target in enumerate(entry.targets):
            where = ("models", index, "targets", position)
            errors.extend(_check_target(target, where, pools_by_ref, provider_refs))
    known = {name for entry in models for name in entry.names}
    known.update(model for pool in pools for model in pool.models)
    errors.extend(_unknown_tenant_models(tenants, known))
    errors.extend(unreachable_rules(tenants))
    return errors


def _check_target(
    target: Target,
    where: tuple[str | int, ...],
    pools_by_ref: dict[str, Pool],
    provider_refs: dict[str, Provider],
) -> list[ItemError]:
    if target.provider is not None:
        provider = provider_refs.get(target.provider)
        if provider is not None:
            return _check_target_api(target, provider, where)
        listed = _listing(provider_refs, "providers")
        return [ItemError(f"unknown provider {target.provider!r} ({listed})", *where, "provider")]
    pool = pools_by_ref.get(str(target.pool))
    if pool is None:
        listed = _listing(pools_by_ref, "pools")
        return [ItemError(f"unknown pool {target.pool!r} ({listed})", *where, "pool")]
    if target.model not in pool.models:
        listed = _listing(pool.models, "it serves")
        message = f"pool {pool.ref} does not serve model {target.model!r} ({listed})"
        return [ItemError(message, *where, "model")]
    return []


def _check_target_api(
    target: Target, provider: Provider, where: tuple[str | int, ...]
) -> list[ItemError]:
    """A provider target may name another API than its provider's only with its own path."""
    if target.api is None or target.path is not None:
        return []
    family = "anthropic" if provider.api == "anthropic" else "openai"
    if target.api == family:
        return []
    message = (
        f"api {target.api!r} differs from provider {provider.ref}'s (api: {provider.api}); "
        "give the target a 'path' that speaks it"
    )
    return [ItemError(message, *where, "api")]


def _unique_model_names(models: Sequence[ModelEntry]) -> list[ItemError]:
    """A name or alias may resolve to only one `models:` entry."""
    errors: list[ItemError] = []
    owner: dict[str, int] = {}
    for index, entry in enumerate(models):
        paths: list[tuple[str | int, ...]] = [("name",)]
        paths.extend(("aliases", position) for position in range(len(entry.aliases)))
        for name, path in zip(entry.names, paths, strict=True):
            first = owner.setdefault(name, index)
            if first != index:
                message = f"model name {name!r} is already used by models[{first}]"
                errors.append(ItemError(message, "models", index, *path))
    return errors


def _unknown_tenant_models(tenants: Sequence[TenantRule], known: set[str]) -> list[ItemError]:
    errors: list[ItemError] = []
    for index, rule in enumerate(tenants):
        for position, model in enumerate(rule.models or ()):
            if model not in known:
                message = (
                    f"unknown model {model!r}: not a name or alias under 'models', "
                    "nor a model any pool serves"
                )
                errors.append(ItemError(message, "tenants", index, "models", position))
    return errors


def _listing(names: Iterable[str], what: str) -> str:
    """`pools: a/b, c/d` (sorted, at most a few), or `no pools defined`."""
    ordered = sorted(names)
    if not ordered:
        return f"no {what} defined"
    shown = ", ".join(ordered[:_MAX_LISTED])
    more = f", ... ({len(ordered)} in all)" if len(ordered) > _MAX_LISTED else ""
    return f"{what}: {shown}{more}"

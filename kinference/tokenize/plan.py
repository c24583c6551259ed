"""Which precise pools' tokenizers a Pick's prompt goes through: per requested model (or
alias), the precise pools it may be routed to, and each pool's tokenizer profile."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kinference.config import Policy, Pool
from kinference.tokenize.begun import Profile


@dataclass(frozen=True, slots=True)
class Plan:
    profiles: dict[str, Profile]  # precise pool ref -> its profile
    by_model: dict[str, tuple[str, ...]]  # requested model or alias -> precise pool refs

    def refs(self, profile: Profile, among: Sequence[str]) -> list[str]:
        return [ref for ref in among if self.profiles[ref] == profile]


def plan_of(policy: Policy) -> Plan:
    profiles = {pool.ref: _profile(pool) for pool in policy.pools if pool.prefix.mode == "precise"}
    by_model: dict[str, tuple[str, ...]] = {}
    names = {name for pool in policy.pools for name in pool.models}
    names.update(name for entry in policy.models for name in (entry.name, *entry.aliases))
    for name in names:
        route = policy.resolve_model(name)
        if route is None:
            continue
        refs = tuple(dict.fromkeys(t.pool for t in route.targets if t.pool in profiles))
        if refs:
            by_model[name] = refs
    return Plan(profiles, by_model)


def _profile(pool: Pool) -> Profile:
    config = pool.prefix
    assert config.tokenizer is not None  # validated for mode precise
    return (config.tokenizer, config.chat_template, config.block_size)

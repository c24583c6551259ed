"""Which ready endpoints serve which model, in which pool: the picker's candidate source."""

from __future__ import annotations

from dataclasses import dataclass

from kinference.config import Policy


@dataclass(frozen=True, slots=True)
class PoolRef:
    """A pool's identity: `namespace/name`, as in an InferencePool reference."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One endpoint that can serve a model, with the pool it is reached through."""

    endpoint: str
    pool: PoolRef


class NoCandidates(LookupError):
    """No ready endpoint serves the model where the caller asked; the message says why."""


class Catalog:
    """An immutable index of the policy's pools, rebuilt whenever the policy changes.

    Static endpoints from the policy file count as ready.
    """

    def __init__(self, policy: Policy) -> None:
        self._by_pool: dict[PoolRef, dict[str, tuple[str, ...]]] = {}
        for pool in policy.pools:
            ref = PoolRef(pool.namespace, pool.name)
            self._by_pool[ref] = {model: tuple(pool.endpoints) for model in pool.models}

    @property
    def pools(self) -> tuple[PoolRef, ...]:
        return tuple(self._by_pool)

    def candidates(self, model: str, pool: PoolRef | None) -> list[Candidate]:
        """Ready endpoints serving `model`: in `pool` when named, else in every pool."""
        if pool is not None:
            return self._in_pool(model, pool)
        found = [
            Candidate(endpoint, ref)
            for ref, models in self._by_pool.items()
            for endpoint in models.get(model, ())
        ]
        if not found:
            if any(model in models for models in self._by_pool.values()):
                raise NoCandidates(f"the pools serving model {model!r} have no ready endpoint")
            raise NoCandidates(f"no pool serves model {model!r}")
        return found

    def _in_pool(self, model: str, pool: PoolRef) -> list[Candidate]:
        models = self._by_pool.get(pool)
        if models is None:
            raise NoCandidates(f"pool {pool} is not known to this picker")
        endpoints = models.get(model)
        if endpoints is None:
            raise NoCandidates(f"pool {pool} does not serve model {model!r}")
        if not endpoints:
            raise NoCandidates(f"pool {pool} has no ready endpoint")
        return [Candidate(endpoint, pool) for endpoint in endpoints]

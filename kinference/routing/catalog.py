"""Which endpoints serve which model in which pool, as worker-table slots."""

from __future__ import annotations

from collections.abc import Iterable

from kinference.config import Pool, Target
from kinference.routing.plugins.cached import APPROXIMATE
from kinference.routing.table import IndexArray, WorkerTable


class Catalog:
    """An immutable index of pools (by `namespace/name`), rebuilt when pools change.

    Slot arrays are computed once per (pool, model), so a Pick only slices numpy arrays.
    """

    def __init__(self, pools: Iterable[Pool], table: WorkerTable) -> None:
        self._slots: dict[tuple[str, str], IndexArray] = {}
        self._pools: dict[str, Pool] = {}
        self._models: dict[str, tuple[str, ...]] = {}  # endpoint -> models it serves
        for pool in pools:
            self._pools[pool.ref] = pool
            for endpoint in pool.endpoints:
                known = self._models.get(endpoint, ())
                self._models[endpoint] = (*known, *(m for m in pool.models if m not in known))
            slots = table.slots(pool.endpoints)
            for slot in slots.tolist():  # the pool's configured batch, or learned (None)
                table.set_batch_limit(slot, pool.max_batch)
            for model in pool.models:
                self._slots[pool.ref, model] = slots

    @property
    def pools(self) -> tuple[Pool, ...]:
        return tuple(self._pools.values())

    def has_pool(self, ref: str) -> bool:
        return ref in self._pools

    def slots(self, ref: str, model: str) -> IndexArray | None:
        """Slots of the pool's endpoints serving `model`; None when the pool does not."""
        return self._slots.get((ref, model))

    def prefix_mode(self, ref: str) -> str:
        """The pool's prefix mode: which `CachedTokenSource` predicts its cached tokens.
        A pool the catalog does not know uses the approximate index."""
        pool = self._pools.get(ref)
        return APPROXIMATE if pool is None else pool.prefix.mode

    def pool_of(self, group: tuple[Target, ...], slot: int) -> str:
        """Which pool of a candidate set (targets tried as one) the chosen slot is in."""
        if len(group) == 1:
            return group[0].pool or ""
        for target in group:
            slots = self.slots(target.pool or "", target.model)
            if slots is not None and slot in slots:
                return target.pool or ""
        return group[0].pool or ""

    def models_of(self, endpoint: str) -> tuple[str, ...]:
        """The models `endpoint` serves in any pool (none: not in a pool)."""
        return self._models.get(endpoint, ())

    def endpoints(self) -> set[str]:
        return {endpoint for pool in self._pools.values() for endpoint in pool.endpoints}

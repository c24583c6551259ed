"""Which endpoints serve which model in which pool, as worker-table slots."""

from __future__ import annotations

from collections.abc import Iterable

from kinference.config import Pool
from kinference.routing.table import IndexArray, WorkerTable


class Catalog:
    """An immutable index of pools (by `namespace/name`), rebuilt when pools change.

    Slot arrays are computed once per (pool, model), so a Pick only slices numpy arrays.
    """

    def __init__(self, pools: Iterable[Pool], table: WorkerTable) -> None:
        self._slots: dict[tuple[str, str], IndexArray] = {}
        self._pools: dict[str, Pool] = {}
        for pool in pools:
            self._pools[pool.ref] = pool
            slots = table.slots(pool.endpoints)
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

    def endpoints(self) -> set[str]:
        return {endpoint for pool in self._pools.values() for endpoint in pool.endpoints}

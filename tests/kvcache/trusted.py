"""A precise pool "p" of two trusted workers (slots 0 and 1), block size 4, for tests."""

from __future__ import annotations

from kinference.kvcache.pool import PoolCaches
from kinference.kvcache.precise import PreciseCaches
from kinference.kvevents.trust import WorkerTrust


def trusted_pool(caches: PreciseCaches) -> PoolCaches:
    pool = caches.pools["p"] = PoolCaches("p", 4)
    for slot in (0, 1):
        pool.trust[slot] = WorkerTrust(5.0, 10.0)
        pool.trust[slot].on_batch(0, 0.0)
    return pool

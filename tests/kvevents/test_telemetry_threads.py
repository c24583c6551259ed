"""The precise-mode gauges are collected on the metrics server's thread
(`prometheus_client.start_http_server`) while the event loop adds and drops workers and
pools and applies batches. The collection reads the loop's state, never writes it, and a
change made by the loop while it runs (its thread can lose the GIL at any call) neither
fails the scrape nor is undone by it."""

from __future__ import annotations

import sys
import threading
from types import FrameType
from typing import Any

from kinference.kvcache.pool import PoolCaches
from kinference.kvcache.precise import PreciseCaches
from kinference.kvevents.events import BlockStored
from kinference.kvevents.telemetry import PreciseCollector
from kinference.kvevents.trust import Distrust, WorkerTrust

BS = 4


class _ChangedMeanwhile(dict[int, str]):
    """A pool's endpoints, whose lookup lets `meanwhile` run first: the loop's own work at
    the moment the metrics thread lost the GIL (a worker added, a pool dropped)."""

    def __init__(self, meanwhile: Any) -> None:
        super().__init__()
        self.meanwhile = meanwhile

    def get(self, key: int, default: Any = None) -> Any:  # type: ignore[override]
        self.meanwhile()
        return super().get(key, default)


def _caches(pools: int, workers: int) -> PreciseCaches:
    caches = PreciseCaches(clock=lambda: 100.0)
    for p in range(pools):
        pool = caches.pools[f"ns/p{p}"] = PoolCaches(f"ns/p{p}", BS)
        for slot in range(workers):
            pool.trust[slot] = WorkerTrust(5.0, 10.0)
            pool.endpoints[slot] = f"10.0.{p}.{slot}:8000"
            hashes = tuple(range(10 * slot + 1, 10 * slot + 4))
            pool.apply(
                slot, [BlockStored(hashes, None, tuple(range(12 * slot, 12 * slot + 12)), BS)]
            )
    return caches


def _samples(collector: PreciseCollector) -> dict[tuple[str, tuple[str, ...]], float]:
    return {
        (sample.name, tuple(sample.labels.values())): sample.value
        for family in collector.collect()
        for sample in family.samples
    }


def test_workers_and_pools_changing_during_a_collection_do_not_fail_it() -> None:
    caches = _caches(3, 4)
    pool = caches.pools["ns/p1"]
    added = iter(range(100, 200))

    def loop_meanwhile() -> None:  # a worker scaled in, another pool dropped
        slot = next(added)
        pool.trust[slot] = WorkerTrust(5.0, 10.0)
        caches.pools.pop("ns/p2", None)

    changing = _ChangedMeanwhile(loop_meanwhile)
    changing.update(pool.endpoints)
    pool.endpoints = changing
    samples = _samples(PreciseCollector(caches))
    assert samples[("kinference_prefix_precise_blocks", ("ns/p0",))] == 12.0


def test_the_blocks_gauge_sums_the_workers_blocks() -> None:
    """Per pool, blocks held summed over its workers (each worker's count is kept: no union
    of every worker's blocks on a scrape, which held the GIL ~50 ms at 8 workers of 200k)."""
    caches = _caches(1, 4)
    pool = caches.pools["ns/p0"]
    pool.apply(0, [BlockStored((1000,), None, tuple(range(12 * 3, 12 * 3 + 4)), BS)])  # worker 3's
    samples = _samples(PreciseCollector(caches))
    assert samples[("kinference_prefix_precise_blocks", ("ns/p0",))] == 13.0


class _HoldInCheck:
    """A line tracer for the metrics thread: held at its first line inside
    `WorkerTrust.check`'s writes (if it gets there) until the loop has acted."""

    def __init__(self) -> None:
        self.reached, self.resume = threading.Event(), threading.Event()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        return self._local if frame.f_code.co_name == "check" else None

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        line = frame.f_lineno - frame.f_code.co_firstlineno
        if event == "line" and line >= 3 and not self.reached.is_set():
            self.reached.set()
            self.resume.wait(5)
        return self._local


def test_a_scrape_does_not_undo_a_batch_the_loop_applied_meanwhile() -> None:
    """A worker whose events were due (a routed request's first token, then silence past
    `stall_after_s`): the metrics thread looks at it just as its batch arrives. The batch
    makes it precise; the scrape, whatever it read before, must not mark it stalled again."""
    caches = _caches(1, 1)
    trust = caches.pools["ns/p0"].trust[0]
    trust.on_batch(0, 50.0)
    trust.routed(90.0)  # due since 90; the clock says 100: past 5 s
    hold, done = _HoldInCheck(), threading.Event()

    def scrape() -> None:
        sys.settrace(hold)
        try:
            _samples(PreciseCollector(caches))
        finally:
            sys.settrace(None)
            done.set()
            hold.reached.set()

    thread = threading.Thread(target=scrape)
    thread.start()
    assert hold.reached.wait(5)
    trust.on_batch(1, 100.0)  # the loop: the batch came
    hold.resume.set()
    thread.join(5)
    assert done.is_set()
    assert trust.distrust is None and trust.trusted(100.0)
    assert trust.state(100.0) is None
    trust.routed(100.0)
    assert trust.state(106.0) is Distrust.STALLED and trust.distrust is None  # a read only

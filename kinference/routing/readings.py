"""What the engines' readings say now: fresh readings, queues carried forward between them,
and each worker's occupancy against the batch it runs at once.

A mixin of `WorkerTable` (`kinference.routing.table`): these read the table's arrays and
change none of them.
"""

from __future__ import annotations

import math
from math import isnan

import numpy as np
import numpy.typing as npt

from kinference.native import load_signals

_FloatArray = npt.NDArray[np.float64]
_IndexArray = npt.NDArray[np.intp]
# A slot's batch, running_max, batch_limit, batch_floor and batch_ceiling (`batch_rows`).
BatchRow = tuple[float, float, float, float, float]

# A worker seen running N sequences without a queue is assumed to take up to this many
# times N until it is seen full (or observed queueing): tried, a queue shows within a few
# picks; assumed exactly N, every pick past N would look like a queue it may not have.
BATCH_HEADROOM = 2.0


class EngineReadings:
    """The readings side of the worker table (its arrays are `WorkerTable`'s)."""

    inflight: _FloatArray
    waiting: _FloatArray
    running: _FloatArray
    kv_usage: _FloatArray
    scraped_at: _FloatArray
    inflight_at_reading: _FloatArray
    batch: _FloatArray
    running_max: _FloatArray
    batch_floor: _FloatArray
    batch_ceiling: _FloatArray
    batch_limit: _FloatArray
    any_reading: bool  # some slot's `scraped_at` is a time (kept by `set_engine`)

    def engine_signals(self, now: float, max_age_s: float) -> tuple[_FloatArray, _FloatArray]:
        """(waiting, KV-cache use) per slot, NaN where unknown or older than `max_age_s`.

        Readings age out here rather than waiting for the next scrape's verdict, so a hung
        engine's last (perhaps saturated) reading never outlives its staleness bound.
        """
        fresh = (now - self.scraped_at) <= max_age_s  # NaN (never scraped) compares False
        return np.where(fresh, self.waiting, np.nan), np.where(fresh, self.kv_usage, np.nan)

    def signals_now(
        self, now: float, max_age_s: float, *, native: bool = True
    ) -> tuple[_FloatArray, _FloatArray, _FloatArray]:
        """`engine_signals` and the `queue_now` of its waiting, in one C call where the
        extension is built (`_ttft.signals`: the same values; `native=False`: numpy's)."""
        signals = load_signals() if native else None
        if signals is not None:
            size = len(self.scraped_at)
            out = np.empty(3 * size)
            readings = (self.scraped_at, self.waiting, self.kv_usage, self.running)
            picks = (self.inflight, self.inflight_at_reading, self.batch)
            if signals(out, float(now), float(max_age_s), *readings, *picks) is None:
                return out[:size], out[size : 2 * size], out[2 * size :]
        waiting, kv_usage = self.engine_signals(now, max_age_s)
        return waiting, kv_usage, self.queue_now(waiting)

    def queue_now(self, waiting: _FloatArray) -> _FloatArray:
        """The engines' queues now, from `waiting` (fresh readings, NaN where unknown),
        carried forward by the picks and completions since each reading.

        Sequences on the engine now are estimated as running + waiting at the reading plus
        the change of in-flight picks since; what exceeds the batch it can run waits. Between
        two readings every pick thus shows up in the queue at once, so picks do not herd onto
        the workers that looked free at the last reading. Without a running count, or for an
        engine never seen full (its batch unknown), the reading is taken as it is.
        """
        size = len(waiting)
        with np.errstate(over="ignore", invalid="ignore"):  # huge readings: inf, inf - inf: NaN
            since = self.inflight[:size] - self.inflight_at_reading[:size]
            held = self.running[:size] + waiting + since
            carried = np.maximum(held - self.batch[:size], 0.0)  # NaN (unknown) stays NaN
        return np.where(np.isnan(carried), waiting, carried)

    def occupancy(
        self, slots: _IndexArray, waiting: _FloatArray, prior_batch: float,
        peer: float | None = None,
    ) -> tuple[_FloatArray, _FloatArray]:  # fmt: skip
        """(sequences on each candidate now, the batch it runs at once).

        Sequences: the fresh reading (`waiting` not NaN) of running + waiting carried
        forward by the picks since, else the in-flight picks. Batch: the pool's
        `max_batch` when configured (capped by what a reading saw run while others
        waited); else, once the engine was seen with requests waiting, the most it was
        ever seen running (while others wait the running count dips when KV cache is
        short); before, `BATCH_HEADROOM` times the most it was seen running or joined
        without queueing, at least `prior_batch`, under a ceiling where a queue was
        observed, and with a fresh reading and nothing waiting more than what runs (up
        to that ceiling). A candidate with neither a full reading nor a ceiling takes
        its fellow candidates' (`peer_batch`) as its ceiling unless it ran more: a pool's
        engines are alike, and each learning its batch by a request queueing there for a
        second cost a queue per engine (few-slots, 18 req/s). `peer`: the pool's
        `peer_batch` where the pool is more than `slots` (None: the candidates').
        """
        inflight, fresh_waiting = self.inflight[slots], waiting[slots]
        running = self.running[slots]
        since = inflight - self.inflight_at_reading[slots]
        held = running + fresh_waiting + since  # NaN without a fresh reading
        fresh = ~np.isnan(held)
        sequences = np.where(fresh, np.maximum(held, 0.0), inflight)
        seen, most = self.batch[slots], self.running_max[slots]
        full = np.where(np.isnan(seen), np.nan, np.fmax(seen, most))  # NaN: never seen full
        floor = np.fmax(most, self.batch_floor[slots])
        guess = np.fmax(BATCH_HEADROOM * floor, prior_batch)  # NaN floor: the prior
        ceiling = self.batch_ceiling[slots]
        if peer is None:
            peer = self.peer_batch(slots)  # for those it does not contradict
        ceiling = np.where(np.isnan(ceiling) & ~(floor > peer), peer, ceiling)
        ceiling = np.where(np.isnan(ceiling), np.nan, np.fmax(ceiling, floor))  # >= floor
        guess = np.fmin(guess, ceiling)  # NaN ceiling: no cap
        took_all = np.where(fresh_waiting > 0, running, running + 1.0)  # NaN: no reading
        took_all = np.fmin(took_all, ceiling)  # a queue was seen past the ceiling
        guess = np.fmax(np.where(fresh, took_all, np.nan), guess)
        batch = np.where(np.isnan(full), guess, full)
        limit = self.batch_limit[slots]
        batch = np.where(np.isnan(limit), batch, np.fmin(limit, full))
        return sequences, np.maximum(batch, 1.0)

    def peer_batch(self, slots: _IndexArray) -> float:
        """The mean batch the slots (the pool's ready workers: `PickContext.pool_slots`)
        were seen to run (a full reading) or queue past (a ceiling), NaN when none was."""
        seen, most = self.batch[slots], self.running_max[slots]
        full = np.where(np.isnan(seen), np.nan, np.fmax(seen, most))
        ceiling = self.batch_ceiling[slots]
        known = np.where(np.isnan(full), np.fmax(ceiling, most), full)
        known = known[~np.isnan(ceiling) | ~np.isnan(full)]
        return float(known.mean()) if len(known) else math.nan

    def batch_rows(self, slots: list[int]) -> list[BatchRow]:
        """What the slots' readings and reports say of their batches, one row per slot,
        read once for the small forms below (each reads most of a row)."""
        seen, most, limit = self.batch.item, self.running_max.item, self.batch_limit.item
        floor, ceiling = self.batch_floor.item, self.batch_ceiling.item
        return [(seen(slot), most(slot), limit(slot), floor(slot), ceiling(slot)) for slot in slots]

    def peer_batch_of(self, slots: list[int]) -> float:
        """`peer_batch` on Python floats, for a handful of candidates."""
        return peer_batch_of_rows(self.batch_rows(slots))

    def occupancy_of(
        self, slot: int, waiting: float, prior_batch: float, peer: float = math.nan
    ) -> tuple[float, float]:
        """`occupancy` of one slot on Python floats (`waiting`: its fresh reading or NaN;
        `peer`: the candidates' `peer_batch`)."""
        return self.occupancy_of_row(slot, self.batch_rows([slot])[0], waiting, prior_batch, peer)

    def occupancy_of_row(
        self, slot: int, row: BatchRow, waiting: float, prior_batch: float, peer: float
    ) -> tuple[float, float]:
        """`occupancy_of`, the slot's `batch_rows` row given."""
        inflight, running = self.inflight.item(slot), self.running.item(slot)
        held = running + waiting + inflight - self.inflight_at_reading.item(slot)
        fresh = not isnan(held)
        sequences = max(held, 0.0) if fresh else inflight
        seen, most, limit, floor, ceiling = row
        full = seen if isnan(most) or isnan(seen) else max(seen, most)
        if not isnan(limit):
            return sequences, max(limit if isnan(full) else min(limit, full), 1.0)
        if not isnan(full):
            return sequences, max(full, 1.0)
        floor = _fmax(most, floor)
        guess = prior_batch if isnan(floor) else max(BATCH_HEADROOM * floor, prior_batch)
        if isnan(ceiling) and not floor > peer:  # what it ran contradicts no peer
            ceiling = peer
        if not isnan(ceiling):
            ceiling = _fmax(ceiling, floor)
            guess = min(guess, ceiling)
        if fresh:
            took_all = running if waiting > 0 else running + 1.0
            guess = max(took_all if isnan(ceiling) else min(took_all, ceiling), guess)
        return sequences, max(guess, 1.0)

    def unsure(self, slots: _IndexArray, peer: float, pool: float | None = None) -> _FloatArray:
        """Per candidate, the most sequences any worker of the pool was seen running (or
        joined unqueued: `pool`, `most_seen`; None: any candidate) where its own batch is
        not known (no full reading, no configured batch, no ceiling of its own or its
        peers'), else NaN: the batch is somewhere from there to the guess. The pool's most,
        not the worker's own: engines of a pool are alike, and one seen running 1 may well
        run 8 (Dynamo's mockers, 1-3 of 8 at 3 req/s)."""
        seen, limit = self.batch[slots], self.batch_limit[slots]
        floor = np.fmax(self.running_max[slots], self.batch_floor[slots])
        known = ~np.isnan(seen) | ~np.isnan(limit) | ~np.isnan(self.batch_ceiling[slots])
        if not isnan(peer):
            known = known | ~(floor > peer)  # the peers' batch is its ceiling
        if pool is None:
            pool = self.most_seen(slots, floor)
        return np.where(known, np.nan, np.fmax(floor, pool))

    def most_seen(self, slots: _IndexArray, floor: _FloatArray | None = None) -> float:
        """The most sequences any of the slots was seen running or joined unqueued
        (`floor`: their `fmax(running_max, batch_floor)`, when already read)."""
        if floor is None:
            floor = np.fmax(self.running_max[slots], self.batch_floor[slots])
        return float(np.nanmax(floor)) if not np.isnan(floor).all() else math.nan

    def unsure_of(self, slot: int, peer: float, pool: float) -> float:
        """`unsure` of one slot on Python floats (`pool`: `most_seen_of` the candidates)."""
        return unsure_of_row(self.batch_rows([slot])[0], peer, pool)

    def most_seen_of(self, slots: list[int]) -> float:
        """The most sequences any of the slots was seen running or joined unqueued."""
        return most_seen_of_rows(self.batch_rows(slots))

    def has_readings(self) -> bool:
        """Whether any engine reading was ever taken (else every engine signal is unknown)."""
        return self.any_reading


def peer_batch_of_rows(rows: list[BatchRow]) -> float:
    """`peer_batch` of the candidates whose `batch_rows` these are."""
    total, count = 0.0, 0
    for seen, most, _, _, ceiling in rows:
        known = _fmax(seen, ceiling)
        if not isnan(known):  # a full reading (it wins), else a ceiling
            known = known if isnan(seen) else seen
            total += _fmax(known, most)
            count += 1
    return total / count if count else math.nan


def most_seen_of_rows(rows: list[BatchRow]) -> float:
    """`most_seen_of` the candidates whose `batch_rows` these are."""
    found = math.nan
    for _, most, _, floor, _ in rows:
        found = _fmax(found, _fmax(most, floor))
    return found


def unsure_of_row(row: BatchRow, peer: float, pool: float) -> float:
    """`unsure_of` the slot whose `batch_rows` row this is."""
    seen, most, limit, floor, ceiling = row
    floor = _fmax(most, floor)
    known = _fmax(_fmax(seen, limit), ceiling)
    if not isnan(known) or (not isnan(peer) and not floor > peer):
        return math.nan
    return _fmax(floor, pool)


def _fmax(a: float, b: float) -> float:
    """The larger of two floats, NaN only when both are (`max(a, b)` of two numbers: `a`
    unless `b` is larger, a comparison rather than a call: this runs ~60 times a Pick)."""
    if isnan(a):
        return b
    return a if isnan(b) or a >= b else b

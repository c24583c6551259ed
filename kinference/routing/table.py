"""Per-worker routing signals as numpy arrays, so scoring costs the same for 8 or 512 workers.

Every endpoint gets a slot the first time it is seen, its own until the worker is gone for
good (`kinference.routing.slots`); arrays grow by doubling. Unknown
values are NaN: a worker whose engine was never scraped, or whose scrape went stale, has an
unknown queue and KV-cache use rather than a made-up zero. What the readings say now (queues
carried forward, occupancy against the batch) is read by `kinference.routing.readings`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from kinference.itl_layout import MIDPOINTS_MS
from kinference.routing.pending import PendingPrefix, PendingPrefixes
from kinference.routing.readings import EngineReadings
from kinference.routing.samples import are_counts, is_sample
from kinference.routing.slots import SlotArrays

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IndexArray = npt.NDArray[np.intp]

EWMA_ALPHA = 0.2  # weight of a new latency observation in the running estimate
# Requests waiting in the readings for this long (seconds) show the batch full.
FULL_AFTER_S = 1.0

# Representative gap of each ITL layout-1 bucket, milliseconds.
ITL_LAYOUT_1_MS = np.array(MIDPOINTS_MS, dtype=np.float64)


class WorkerTable(SlotArrays, EngineReadings):
    """In-flight load, engine metrics, readiness and latency estimates per worker slot."""

    def __init__(self, capacity: int = 64, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock  # monotonic seconds: how long pending prefill has drained
        self._slots: dict[str, int] = {}
        self._free: list[int] = []
        self.endpoints: list[str] = []
        self.inflight: FloatArray = np.zeros(capacity)
        # Requests ended on each worker (every in-flight decrement, ours and other
        # replicas'): a first token shows the batch held all its pick joined only if none
        # ended there in between (`LocalChoice.ended_before`).
        self.ended: FloatArray = np.zeros(capacity)
        self.waiting: FloatArray = np.full(capacity, np.nan)
        self.running: FloatArray = np.full(capacity, np.nan)
        self.kv_usage: FloatArray = np.full(capacity, np.nan)
        self.ready: BoolArray = np.ones(capacity, dtype=bool)
        self.scraped_at: FloatArray = np.full(capacity, np.nan)  # monotonic s of the reading
        # Whether any slot has a reading time: read at every Pick, so kept rather than
        # derived from `scraped_at` there (a reduction over every slot).
        self.any_reading = False
        # In-flight picks when the reading was taken, and the most sequences the engine was
        # seen running at once (its batch size; exactly what runs while some wait): with
        # them the queue is carried forward between readings (`queue_now`).
        self.inflight_at_reading: FloatArray = np.full(capacity, np.nan)
        self.batch: FloatArray = np.full(capacity, np.nan)
        # Since when (monotonic s of the reading) the readings have shown requests waiting,
        # NaN while none wait: a queue standing `FULL_AFTER_S` is a full batch; a shorter one
        # may be a request caught before the scheduler's step, a long prompt's prefill, or
        # the engine stalled a moment on a busy host.
        self.waited_since: FloatArray = np.full(capacity, np.nan)
        # The most sequences the engine was ever seen running: a floor of its batch (the
        # running count while others wait dips when its KV cache is short).
        self.running_max: FloatArray = np.full(capacity, np.nan)
        # Learned from observed TTFT: the most sequences a request was seen joining without
        # queueing (a floor of the batch; with readings only when none ended there before
        # its first token), and one less than the fewest it was seen queueing behind (a
        # ceiling); NaN until observed.
        self.batch_floor: FloatArray = np.full(capacity, np.nan)
        self.batch_ceiling: FloatArray = np.full(capacity, np.nan)
        # The pool's `max_batch` (its engines' max_num_seqs), NaN when not configured.
        self.batch_limit: FloatArray = np.full(capacity, np.nan)
        # Picks in flight on each worker that joined one past the most its pool was seen
        # running, priced without the unknown batch's doubt (`doubt.unseen_wait`), until
        # their first token (or release) shows whether the batch held them.
        self.probing: FloatArray = np.zeros(capacity)
        # The sequences such a pick joined whose first token was not on time (NaN: none):
        # the pool probes that far no more (a queue or not, it cannot tell).
        self.probe_late: FloatArray = np.full(capacity, np.nan)
        self._probes: dict[object, int] = {}  # such a pick's key -> its slot
        # Uncached prompt tokens picked to each worker that have no first token yet, and
        # (for those with prefix blocks) which blocks they compute.
        self.pending_prefill: FloatArray = np.zeros(capacity)
        self.pending = PendingPrefixes()
        # Since when (monotonic s) each worker has had pending prefill without a break, and
        # of the tokens pending then or added since, those whose first token came: the
        # engine has computed about (now - since) / ms_per_token tokens since, so that many
        # less the ended ones of what is pending now (`prefill_done`).
        self.prefill_since: FloatArray = np.full(capacity, np.nan)
        self.prefill_ended: FloatArray = np.zeros(capacity)
        self.adapters: list[frozenset[str]] = []
        self._lora: dict[str, BoolArray] = {}  # adapter name -> which slots have it loaded
        self._ttft: dict[str, FloatArray] = {}  # per model, milliseconds (EWMA)
        self._itl: dict[str, FloatArray] = {}  # per model, mean inter-token gap ms (EWMA)

    @property
    def clock(self) -> Callable[[], float]:
        """The monotonic clock (seconds) pending prefill drains by (`prefill_done`)."""
        return self._clock

    def add_inflight(self, slot: int, delta: float) -> None:
        """Requests in flight on a worker change by `delta` (never below zero)."""
        self.inflight[slot] = max(self.inflight.item(slot) + delta, 0.0)  # Python floats
        if delta < 0.0:
            self.ended[slot] = self.ended.item(slot) - delta

    def add_pending_prefill(self, slot: int, tokens: float) -> None:
        """Uncached prompt tokens awaiting their first token change by `tokens`."""
        before = self.pending_prefill.item(slot)
        after = max(before + tokens, 0.0)
        self.pending_prefill[slot] = after
        if after <= 0.0:  # drained: the next prefill starts a new stretch
            self.prefill_since[slot] = np.nan
            self.prefill_ended[slot] = 0.0
        elif before <= 0.0:
            self.prefill_since[slot] = self._clock()
        elif tokens < 0.0:
            self.prefill_ended[slot] = self.prefill_ended.item(slot) - tokens

    def prefill_done(self, slot: int, ms_per_token: float) -> float:
        """Of the worker's pending prefill, the tokens its engine has computed by now at
        `ms_per_token`, if it prefills them one after the other from when the stretch
        began (as vLLM's scheduler does: a prompt being prefilled runs first, in chunks of
        the step's token budget, and a new one waits for the budget it leaves)."""
        since = self.prefill_since.item(slot)
        if math.isnan(since) or ms_per_token <= 0.0:
            return 0.0
        computed = (self._clock() - since) * 1000.0 / ms_per_token
        done = computed - self.prefill_ended.item(slot)
        return min(max(done, 0.0), self.pending_prefill.item(slot))

    def start_prefill(self, slot: int, key: object, entry: PendingPrefix) -> None:
        """A pick's prefill, by its prefix blocks, pending on `slot` until `end_prefill`."""
        self.pending.add(slot, key, entry)
        self.add_pending_prefill(slot, entry.tokens)

    def end_prefill(self, slot: int, key: object) -> bool:
        """That pick's prefill is over (first token, error, release); again is a no-op
        (answers False)."""
        entry = self.pending.pop(slot, key)
        if entry is not None:  # the last one drains it all: no rounding residue stays
            drained = not self.pending.holds(slot)
            self.add_pending_prefill(
                slot, -self.pending_prefill.item(slot) if drained else -entry.tokens
            )
        return entry is not None

    def start_probe(self, slot: int, key: object) -> None:
        """A pick joined `slot` one past its pool's most seen, without doubt (`probing`)."""
        self._probes[key] = slot
        self.probing[slot] = self.probing.item(slot) + 1.0

    def end_probe(self, key: object) -> None:
        """That pick's first token came (or it was released); again, or none: a no-op."""
        slot = self._probes.pop(key, None)
        if slot is not None:
            self.probing[slot] = max(self.probing.item(slot) - 1.0, 0.0)

    def probe_came_late(self, slot: int, sequences: float) -> None:
        """A probe that joined `slot` as its `sequences`-th had no first token on time:
        the pool probes that far no more (`probe_late`)."""
        self.probe_late[slot] = sequences

    def shared_pending(self, slot: int, hashes: tuple[int, ...]) -> float:
        """Of `slot`'s pending prefill, the tokens a prompt with `hashes` shares."""
        return self.pending.shared(slot, hashes)

    def set_batch_limit(self, slot: int, limit: float | None) -> None:
        """The configured batch of the worker's engine (None: learned)."""
        self.batch_limit[slot] = np.nan if limit is None else limit

    def observed_batch(
        self, slot: int, sequences: float, *, queued: bool, floor: bool = True
    ) -> None:
        """A request joined `sequences` (itself included) and queued or not (from its
        observed TTFT): no queue raises the floor (unless `floor` is False: readings give
        it) and drops a ceiling below it, a queue past the floor sets a ceiling under it."""
        low, ceiling = self.batch_floor.item(slot), self.batch_ceiling.item(slot)
        if not queued:
            if floor and not low >= sequences:  # NaN floor: none yet
                self.batch_floor[slot] = sequences
            if ceiling < sequences:
                self.batch_ceiling[slot] = np.nan
        elif not low >= sequences:  # NaN floor: no evidence against
            below = max(sequences - 1.0, 1.0)
            self.batch_ceiling[slot] = below if math.isnan(ceiling) else min(ceiling, below)

    def forget_batch(self, slot: int) -> None:
        """A worker left: what was learned of its batch no longer applies to its slot."""
        self.batch_floor[slot] = self.batch_ceiling[slot] = self.probe_late[slot] = np.nan

    def forget_latency(self, slot: int) -> None:
        """A worker left: its observed TTFT and ITL no longer apply to its slot."""
        for estimates in (*self._ttft.values(), *self._itl.values()):
            estimates[slot] = np.nan

    def set_ready(self, slot: int, ready: bool) -> None:
        self.ready[slot] = ready

    def set_engine(
        self,
        slot: int,
        *,
        waiting: float | None,
        running: float | None,
        kv_usage: float | None,
        adapters: frozenset[str] = frozenset(),
        scraped_at: float | None = None,
    ) -> None:
        """Latest scraped engine metrics; None means unknown (never scraped, stale, failed)."""
        self.waiting[slot] = np.nan if waiting is None else waiting
        self.running[slot] = np.nan if running is None else running
        self.kv_usage[slot] = np.nan if kv_usage is None else kv_usage
        self.scraped_at[slot] = np.nan if scraped_at is None else scraped_at
        if scraped_at is not None:
            self.any_reading = True
        elif self.any_reading:  # this slot's may have been the last
            self.any_reading = not np.isnan(self.scraped_at).all()
        self.inflight_at_reading[slot] = self.inflight[slot]
        if running is not None:
            self._seen_running(slot, running, waiting, scraped_at)
        for name in self.adapters[slot] - adapters:
            self._lora[name][slot] = False
        for name in adapters - self.adapters[slot]:
            self._lora.setdefault(name, np.zeros(len(self.inflight), dtype=bool))[slot] = True
        self.adapters[slot] = adapters

    def _seen_running(
        self, slot: int, running: float, waiting: float | None, scraped_at: float | None
    ) -> None:
        """What a reading's running count tells of the batch."""
        self.running_max[slot] = np.fmax(self.running_max[slot], running)
        if self.batch_ceiling.item(slot) < running:  # it runs more than a queue said
            self.batch_ceiling[slot] = np.nan
        # While requests wait, what runs is the batch the engine can hold now (fewer
        # than its maximum when KV cache is short); otherwise it can hold at least that.
        # Until it was seen full its batch is unknown: an idle engine running nothing
        # says nothing of how many it could run. Full is requests waiting in two
        # readings running at least `FULL_AFTER_S` apart: a scheduler admits new
        # requests at its next step, so one reading may catch one waiting behind an
        # engine far from full (Dynamo's mockers showed 1 running, 1 waiting, with 8
        # slots: a batch of 1 learned), and two 0.2 s apart caught a long prefill or a
        # stall of the engine's process on a busy host (a batch of 2 learned, 8 slots).
        queued = waiting is not None and waiting > 0
        at = math.nan if scraped_at is None else scraped_at
        since = self.waited_since.item(slot)
        if queued and at - since >= FULL_AFTER_S:
            self.batch[slot] = running
        elif not np.isnan(self.batch[slot]):
            self.batch[slot] = max(self.batch[slot], running)
        if not queued:
            self.waited_since[slot] = np.nan
        elif math.isnan(since):
            self.waited_since[slot] = at

    def lora_mask(self, adapter: str) -> BoolArray | None:
        """Slots whose engine has `adapter` loaded (running or waiting), if any ever had."""
        return self._lora.get(adapter)

    def ttft_ms(self, model: str) -> FloatArray:
        return self._estimates(self._ttft, model)

    def itl_ms(self, model: str) -> FloatArray:
        return self._estimates(self._itl, model)

    def observe_ttft(self, slot: int, model: str, ttft_ms: float) -> None:
        if not is_sample(ttft_ms):  # no report's: it would stay in the mean (`samples`)
            return
        _ewma(self._estimates(self._ttft, model), slot, ttft_ms)

    def observe_itl(self, slot: int, model: str, bucket_counts: tuple[int, ...]) -> None:
        """Fold one response's layout-1 ITL bucket counts into the mean-gap estimate."""
        total = sum(bucket_counts)
        if total > 0 and are_counts(
            bucket_counts
        ):  # a few Python floats: cheaper than building arrays per report
            weighted = 0.0
            for count, gap_ms in zip(bucket_counts, MIDPOINTS_MS, strict=True):
                if count:
                    weighted += count * gap_ms
            _ewma(self._estimates(self._itl, model), slot, weighted / total)

    def _estimates(self, table: dict[str, FloatArray], model: str) -> FloatArray:
        array = table.get(model)
        if array is None:
            array = table[model] = np.full(len(self.inflight), np.nan)
        return array


def _ewma(array: FloatArray, slot: int, value: float) -> None:
    old = array.item(slot)  # a Python float: the same arithmetic without numpy scalars
    array[slot] = value if math.isnan(old) else (1 - EWMA_ALPHA) * old + EWMA_ALPHA * value

"""The worker table's slots: one per endpoint, allocated on first sight, grown by doubling,
and freed for reuse once a worker is gone for good.

A worker is gone for good when it is in no pool of the policy in force and nothing counts
on its slot any more: no request in flight there (ours or another replica's), no prefill
pending, no probe (`SlotArrays.idle`). Until then its slot stays its own, so that a late
release or report of a request picked there finds the slot it changed and no other. A
pool whose pods are replaced every few minutes then keeps a table of its live workers and
of those still draining, not of every address it ever had.

A mixin of `WorkerTable` (`kinference.routing.table`): the arrays are declared there.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from kinference.routing.pending import PendingPrefixes

_FloatArray = npt.NDArray[np.float64]
_BoolArray = npt.NDArray[np.bool_]
_IndexArray = npt.NDArray[np.intp]

# Every per-slot array of the table, with what a slot that knows nothing holds: unknown
# readings and estimates are NaN, counts zero, readiness True (until a scrape says not).
FILLS: tuple[tuple[str, object], ...] = (
    ("inflight", 0.0), ("ended", 0.0), ("waiting", np.nan), ("running", np.nan),
    ("kv_usage", np.nan), ("ready", True), ("scraped_at", np.nan),
    ("inflight_at_reading", np.nan), ("batch", np.nan), ("waited_since", np.nan),
    ("running_max", np.nan), ("batch_floor", np.nan), ("batch_ceiling", np.nan),
    ("batch_limit", np.nan), ("pending_prefill", 0.0), ("prefill_since", np.nan),
    ("prefill_ended", 0.0), ("probing", 0.0), ("probe_late", np.nan),
)  # fmt: skip


class SlotArrays:
    """Slot allocation, growth and reuse (the arrays are `WorkerTable`'s)."""

    _slots: dict[str, int]  # endpoint -> slot
    _free: list[int]  # freed slots, a heap: the lowest is reused first
    endpoints: list[str]  # by slot; "" for a freed one
    adapters: list[frozenset[str]]
    inflight: _FloatArray
    pending_prefill: _FloatArray
    probing: _FloatArray
    scraped_at: _FloatArray
    any_reading: bool
    pending: PendingPrefixes
    _lora: dict[str, _BoolArray]
    _ttft: dict[str, _FloatArray]
    _itl: dict[str, _FloatArray]

    def __len__(self) -> int:
        """Slots allocated, freed ones included (the arrays' used length)."""
        return len(self.endpoints)

    def slot(self, endpoint: str) -> int:
        """The endpoint's slot, allocated on first sight (a freed one if any)."""
        found = self._slots.get(endpoint)
        if found is not None:
            return found
        if self._free:
            slot = heapq.heappop(self._free)
            self._rename(slot, endpoint)
        else:
            slot = len(self.endpoints)
            if slot >= len(self.inflight):
                self._grow(max(2 * len(self.inflight), 1))
            self.endpoints.append(endpoint)
            self.adapters.append(frozenset())
        self._slots[endpoint] = slot
        return slot

    def slots(self, endpoints: Iterable[str]) -> _IndexArray:
        return np.fromiter((self.slot(e) for e in endpoints), dtype=np.intp)

    def find(self, endpoint: str) -> int | None:
        """The endpoint's slot if it has one (none allocated)."""
        return self._slots.get(endpoint)

    def idle(self, slot: int) -> bool:
        """Whether nothing counts on `slot`: no request in flight, no prefill pending, no
        probe (what a late release or report of a request picked there would change)."""
        return (
            self.inflight.item(slot) <= 0.0
            and self.pending_prefill.item(slot) <= 0.0
            and not self.pending.holds(slot)
            and self.probing.item(slot) <= 0.0
        )

    def free(self, slot: int) -> None:
        """`slot`'s worker is gone for good (`idle`, in no pool): the slot forgets it all
        and goes to the next endpoint first seen. Freed already: a no-op."""
        endpoint = self.endpoints[slot]
        if self._slots.get(endpoint) != slot:
            return
        del self._slots[endpoint]
        self._rename(slot, "")
        for name, fill in FILLS:
            getattr(self, name)[slot] = fill
        for mask in self._lora.values():
            mask[slot] = False
        for estimates in (*self._ttft.values(), *self._itl.values()):
            estimates[slot] = np.nan
        self.adapters[slot] = frozenset()
        if self.any_reading:  # this slot's may have been the last
            self.any_reading = not np.isnan(self.scraped_at).all()
        heapq.heappush(self._free, slot)

    def _rename(self, slot: int, endpoint: str) -> None:
        """A new `endpoints` list: what keeps a list's derived values by its identity
        (`MaxScorePicker.slot_ids`) makes them afresh."""
        endpoints = list(self.endpoints)
        endpoints[slot] = endpoint
        self.endpoints = endpoints

    def _grow(self, capacity: int) -> None:
        def grown(array: npt.NDArray[np.generic], fill: object) -> npt.NDArray[np.generic]:
            bigger = np.full(capacity, fill, dtype=array.dtype)
            bigger[: len(array)] = array
            return bigger

        for name, fill in FILLS:
            setattr(self, name, grown(getattr(self, name), fill))
        for name, mask in self._lora.items():
            self._lora[name] = grown(mask, False)  # type: ignore[assignment]
        for estimates in (self._ttft, self._itl):
            for model, array in estimates.items():
                estimates[model] = grown(array, np.nan)  # type: ignore[assignment]

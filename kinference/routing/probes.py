"""Probes: requests sent past the most sequences a pool was seen running, one at a time.

While a worker's batch is not known (no full reading, no configured batch, no ceiling),
nothing tells a batch of exactly the most seen running from a larger one until a request
joins more: the readings show what the load put there. A request that would be the first
past that frontier pays a small share of the unknown batch's doubt (`ttft.
probe_batch_weight`) and goes as a probe; its first token answers. Fast, with no request
ended on the worker since its pick (it ran beside all it joined), and the worker's floor
rises to what it joined (`Learning._batch_evidence`), so the next probe may go further;
late after one ended there (a queued request waits for one to end), and a ceiling is set
under it. A fast first token after one ended proves nothing: a slot may have freed just
in time (few-slots: a 5th on an engine of 4 slots, 56 ms, raised the floor to 5 and
queued the hits after it for 0.5-0.7 s). While a probe on any of a Pick's candidates
has no first token, every other request past the frontier there pays the full doubt: on
a pool of like engines they bet on the same unknown (few-slots, h33: four hits sent to
one 4-slot engine within 0.4 s, before the first one's late first token, all queued).

A probe is tracked from its pick to its first token, upstream error or release, under
the same key as its pending prefill (`WorkerTable.end_prefill` ends both). Each gateway
replica keeps its own probes (they are not shared through the journal), as it keeps the
batch floors they raise: with N replicas up to N probes may be under way at a frontier.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


class Probes:
    """The probe under way per worker slot (at most one: a second past the frontier there
    would have paid the full doubt and gone as no probe)."""

    def __init__(self, capacity: int) -> None:
        self.flags: npt.NDArray[np.bool_] = np.zeros(capacity, dtype=bool)
        self.ended: npt.NDArray[np.float64] = np.zeros(capacity)  # requests ended per slot
        self._keys: dict[int, tuple[object, float]] = {}  # slot -> (key, ended at start)

    def grow(self, capacity: int) -> None:
        flags, ended = np.zeros(capacity, dtype=bool), np.zeros(capacity)
        flags[: len(self.flags)], ended[: len(self.ended)] = self.flags, self.ended
        self.flags, self.ended = flags, ended

    def ended_on(self, slot: int, count: float) -> None:
        """`count` requests on the worker ended (its in-flight count fell)."""
        self.ended[slot] = self.ended.item(slot) + count

    def start(self, slot: int, key: object) -> None:
        self._keys[slot] = (key, self.ended.item(slot))
        self.flags[slot] = True

    def held(self, slot: int, key: object) -> bool | None:
        """Whether no request ended on the worker since `key`'s probe was picked there
        (None: it is no probe under way). Then it ran beside all it joined: a fast first
        token shows the batch holds them; a queued probe waits for one to end, and a
        probe that is late after one ended likely queued."""
        found = self._keys.get(slot)
        if found is None or found[0] != key:
            return None
        return self.ended.item(slot) <= found[1]

    def end(self, slot: int, key: object) -> bool:
        """`key`'s probe on `slot` is answered or abandoned (False: it was none)."""
        found = self._keys.get(slot)
        if found is None or found[0] != key:
            return False
        del self._keys[slot]
        self.flags[slot] = False
        return True

    def any_of(self, slots: npt.NDArray[np.intp]) -> bool:
        """Whether a probe is under way on any of `slots` (no numpy call while none is)."""
        return bool(self._keys) and bool(self.flags[slots].any())

    def forget(self, slot: int) -> None:
        """The worker left: its probe no longer tells anything."""
        self._keys.pop(slot, None)
        self.flags[slot] = False

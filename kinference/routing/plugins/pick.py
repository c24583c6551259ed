"""The choice: the highest weighted total; near ties of a cold prefix go to its home.

A prompt whose prefix no candidate holds costs about the same everywhere, so several
candidates come out near the best. Broken at random, two copies of one document arriving
close together (or on two replicas, or after the index learned it was evicted) would be
prefilled on two engines, each copy evicting what others reuse. Instead, the candidates
within `HOME_TOLERANCE` of the best total are ranked by rendezvous hashing of the
prompt's leading blocks with each candidate's endpoint: the same prefix always prefers
the same engine among those that are about as good (its "home"), on every replica, and
when that engine leaves or is busy, the next of its ranking. Exact ties of prompts with
no prefix blocks are still broken at random (so cold prompts on idle workers spread).
"""

from __future__ import annotations

import random
from hashlib import blake2b
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from kinference.routing.table import FloatArray

TIE = 1e-9  # totals closer than this are a tie
# Totals within this share of the best are near ties for a cold prefix's home (with the
# TTFT scorer alone, a cost within ~11 % of the cheapest).
HOME_TOLERANCE = 0.1
HOME_BLOCKS = 16  # the leading blocks naming a prefix's home (1 KiB at 64-byte blocks)
_MAX_IDS = 4096  # endpoint hashes cached (endpoints come from the policy; a bound anyway)
_MASK = (1 << 64) - 1


class MaxScorePicker:
    """The best total; among equal bests, one drawn at random, or for a cold prefix (a
    `home` key given) its rendezvous-hash favourite among the near bests."""

    name: ClassVar[str] = "max_score"

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        # `slot_ids`: the ids of a table's endpoints by slot, and the list they are of
        self._slot_ids: npt.NDArray[np.uint64] = np.zeros(0, dtype=np.uint64)
        self._of: list[str] | None = None

    def slot_ids(self, endpoints: list[str]) -> npt.NDArray[np.uint64]:
        """The endpoint hash (`_id`) of each of a worker table's `endpoints`, by slot, for
        the C choice (`_ttft.choose`). A table appends endpoints to its list, or makes a
        new list when a slot is freed or reused (`SlotArrays._rename`): the array grows
        with the list, and is made afresh for another list."""
        ids = self._slot_ids
        if endpoints is self._of and len(ids) == len(endpoints):
            return ids
        known = len(ids) if endpoints is self._of and len(ids) < len(endpoints) else 0
        more = [self._ids.get(name) or self._id(name) for name in endpoints[known:]]
        ids = np.concatenate((ids[:known], np.array(more, dtype=np.uint64)))
        self._slot_ids, self._of = ids, endpoints
        return ids

    def pick(
        self,
        totals: FloatArray | list[float],
        rng: random.Random,
        home: int | None = None,
        endpoints: list[str] | None = None,
    ) -> int:
        """`home`: the key of a prefix no candidate holds, `endpoints` the candidates'.
        `totals` as an array or (a handful of candidates) as the Python floats it holds."""
        if len(totals) == 1:
            return 0
        # a handful of floats: cheaper than numpy calls
        values = totals if isinstance(totals, list) else totals.tolist()
        best = max(values)
        if home is not None and endpoints is not None:
            floor = best - max(abs(best) * HOME_TOLERANCE, TIE)
            near = [i for i, value in enumerate(values) if value >= floor]
            if len(near) == 1:
                return near[0]
            ids = self._ids
            ranks = [_mix(home ^ (ids.get(endpoints[i]) or self._id(endpoints[i]))) for i in near]
            return near[ranks.index(max(ranks))]
        floor = best - TIE
        ties = [i for i, value in enumerate(values) if value >= floor]
        return ties[0] if len(ties) == 1 else rng.choice(ties)

    def _id(self, endpoint: str) -> int:
        """A stable 64-bit hash of the endpoint (the same on every replica)."""
        ident = self._ids.get(endpoint)
        if ident is None:
            if len(self._ids) >= _MAX_IDS:
                self._ids.clear()
            digest = blake2b(endpoint.encode(), digest_size=8).digest()
            ident = self._ids[endpoint] = int.from_bytes(digest, "little")
        return ident


def home_key(hashes: tuple[int, ...]) -> int | None:
    """The key of a prompt's home: its chained hash after `HOME_BLOCKS` blocks (or its
    last), naming the prefix that far; None without blocks."""
    return hashes[min(len(hashes), HOME_BLOCKS) - 1] if hashes else None


def _mix(value: int) -> int:
    """splitmix64's finaliser: every bit of the key and the endpoint spreads."""
    value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    value = (value ^ (value >> 27)) * 0x94D049BB133111EB & _MASK
    return value ^ (value >> 31)

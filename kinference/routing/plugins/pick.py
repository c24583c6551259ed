"""The choice: the highest weighted total, ties broken at random."""

from __future__ import annotations

import random
from typing import ClassVar

from kinference.routing.table import FloatArray

TIE = 1e-9  # totals closer than this are a tie


class MaxScorePicker:
    """The best total; among equal bests, one drawn at random (so cold prompts on idle
    workers spread instead of following slot order)."""

    name: ClassVar[str] = "max_score"

    def pick(self, totals: FloatArray, rng: random.Random) -> int:
        if len(totals) == 1:
            return 0
        values = totals.tolist()  # a handful of floats: cheaper than numpy calls
        floor = max(values) - TIE
        ties = [i for i, value in enumerate(values) if value >= floor]
        return ties[0] if len(ties) == 1 else rng.choice(ties)

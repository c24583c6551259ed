"""Time to first token and inter-token arrival gaps, in the spec's ITL layout 1.

The layout's buckets and edges are kinference.itl_layout's (one definition for the picker,
its metrics and the gateway).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kinference import itl_layout

_MAX_UINT32 = 2**32 - 1


class TokenClock:
    """Arrival times of one response's content events, from the moment it was dispatched.

    `token()` is called once per content-bearing event as it arrives; the first sets the
    TTFT, each later one adds the gap since the previous to its bucket.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.started = clock()
        self.ttft_ms: int | None = None
        self.tokens = 0  # content events seen; the usage fallback counts them
        self._last: float | None = None
        self.gap_sum_s = 0.0  # the gaps between content events, summed, seconds
        self._buckets = [0] * itl_layout.BUCKETS

    def token(self) -> bool:
        """Record one content event; True when it was the first."""
        now = self._clock()
        self.tokens += 1
        last, self._last = self._last, now
        if last is None:
            self.ttft_ms = _ms(now - self.started)
            return True
        gap = now - last
        self.gap_sum_s += gap
        self._buckets[itl_layout.bucket(gap * 1000.0)] += 1
        return False

    def first_byte(self) -> None:
        """A response that is not a token stream: its first byte is its first token."""
        if self.ttft_ms is None:
            self.ttft_ms = _ms(self._clock() - self.started)

    @property
    def itl_bucket_counts(self) -> list[int]:
        """Counts per bucket, or empty when fewer than two tokens left no gap (spec)."""
        return list(self._buckets) if self.tokens >= 2 else []


def _ms(seconds: float) -> int:
    return min(max(round(seconds * 1000.0), 0), _MAX_UINT32)

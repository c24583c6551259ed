"""Time to first token and inter-token arrival gaps, in the spec's ITL layout 1.

Layout 1 (picker.proto, ReportFinalTokenRequest): 15 upper-inclusive buckets with these
upper edges in milliseconds; a gap goes in the first bucket whose edge is >= it, and
anything past the last edge in the overflow bucket.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable

ITL_LAYOUT = 1
ITL_EDGES_MS = (5, 10, 15, 20, 30, 40, 50, 75, 100, 150, 200, 300, 500, 1000)
_MAX_UINT32 = 2**32 - 1


def itl_bucket(gap_ms: float) -> int:
    """Index of the layout-1 bucket holding a gap of `gap_ms` milliseconds."""
    return bisect.bisect_left(ITL_EDGES_MS, gap_ms)


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
        self._buckets = [0] * (len(ITL_EDGES_MS) + 1)

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
        self._buckets[itl_bucket(gap * 1000.0)] += 1
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

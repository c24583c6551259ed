"""The busy fit: what each sequence running beside a request adds to its first token, per
model (`Rates.busy_ms`).

A sample is a request's TTFT beyond its predicted queue and its worker's learned prefill
(the excess, ms) against the sequences running beside it when it joined (0 or more). The
fit is a line, `excess = offset + busy_ms * sequences`, by exponentially weighted least
squares, and only its slope is used: the offset is the prefill fit's error (a fixed cost
not learned yet: the prior's 15 ms where a mocker's hit takes ~40), which a fit through
the origin would put into the slope at once, the more the fewer sequences its samples
have (one sample beside one sequence made the busy cost its whole excess). Requests alone
on their worker (0 beside) are samples too: they say what the excess is without any
sequence. The slope is known once the samples' sequences differ (`MIN_SPREAD_SEQUENCES`);
until then the prior applies.
"""

from __future__ import annotations

import math

# What one running sequence can add to a TTFT, at most (ms): a larger fit is a queue the
# model did not see, not the cost of sharing the engine's steps.
MAX_BUSY_MS = 50.0
# Sequences beside a request that a sample may claim: more than any engine runs (a larger
# value, say from a corrupt stream entry, would overflow the fit's sums).
MAX_BUSY_SEQUENCES = 100_000.0
# The samples' sequences must spread this much (weighted standard deviation) before the
# slope is fitted: below it, the samples cannot tell the slope from the offset.
MIN_SPREAD_SEQUENCES = 0.5


def busy_sample(sequences: float, excess_ms: float) -> tuple[float, float] | None:
    """A busy sample as the fit takes it: `excess_ms` within MAX_BUSY_MS a sequence (one at
    least) either way (more is a queue the model did not see; less, a prefill misread), or
    None when it says nothing (negative or more sequences than any engine runs, NaN)."""
    if not (0.0 <= sequences <= MAX_BUSY_SEQUENCES and math.isfinite(excess_ms)):
        return None
    bound = MAX_BUSY_MS * max(sequences, 1.0)
    return sequences, min(max(excess_ms, -bound), bound)


class BusyFit:
    """One model's weighted sums (weight, sequences, excess, sequences², sequences x excess)
    and the slope fitted from them (NaN until the sequences spread)."""

    __slots__ = ("slope", "sums")

    def __init__(self) -> None:
        self.sums = (0.0, 0.0, 0.0, 0.0, 0.0)
        self.slope = math.nan

    def add(self, alpha: float, sequences: float, excess: float) -> None:
        keep, a, x, y = 1.0 - alpha, alpha, sequences, excess
        added = (a, a * x, a * y, a * x * x, a * x * y)
        w, sx, sy, sxx, sxy = (
            old * keep + more for old, more in zip(self.sums, added, strict=True)
        )
        self.seed(w, sx, sy, sxx, sxy)

    def seed(self, w: float, sx: float, sy: float, sxx: float, sxy: float) -> None:
        """Take these sums (a new replica: the cluster's, `cluster.stats`) and refit."""
        self.sums = (w, sx, sy, sxx, sxy)
        if w <= 0.0:
            return
        mean_x = sx / w
        var = sxx / w - mean_x * mean_x
        if var >= MIN_SPREAD_SEQUENCES**2:
            fitted = (sxy / w - mean_x * sy / w) / var
            self.slope = min(max(fitted, 0.0), MAX_BUSY_MS)

"""Per model: how much each running sequence slows the others' output tokens (the decode
slow-down), learned online from ReportFinalToken, and the model's mean reply length.

An engine decodes all its running sequences in one step, and the step grows with what they
hold: vLLM's attention reads every running sequence's KV tokens; Dynamo's mocker (1.6.1,
its default polynomial) takes `5.74 + 54.01 u - 25.74 u**2` ms a step, `u` the running
sequences' KV tokens over the cache's. So a reply decodes slower beside more sequences
(h131: chats piled by prefix affinity on a few mockers decoded 1.11-1.18 x slower per token
than spread by least-in-flight, at 3 req/s, where no batch is near full).

Each finished request is one sample: its mean inter-token gap (the layout-1 ITL buckets'
midpoints, weighted by their counts) against the sequences running beside it when it
joined, fitted as `gap = alone + ms_per_sequence * beside` by exponentially weighted least
squares (each sample weighs `alpha`, older ones decay by `1 - alpha`), the slope clamped to
[0, MAX_MS_PER_SEQUENCE] and refitted only once the samples' occupancies differ (variance
>= MIN_SPREAD). One fit per model (a pool's engines share it: every report teaches it, not
one worker's in four), as the busy cost (`routing.rates`). Reply length: an exponentially
weighted mean of the reports' output tokens (the gaps counted, plus the first token).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kinference.itl_layout import MIDPOINTS_MS

# Variance of the sequences beside (sequences squared) below which the slope is not fitted:
# samples all taken at one occupancy cannot tell the slow-down from the engine's own speed.
MIN_SPREAD = 0.25
MAX_MS_PER_SEQUENCE = 50.0  # a larger slope is noise: no engine's step grows that fast
MIN_GAPS = 4  # a reply of fewer gaps says little of its decode
PRIOR_OUTPUT_TOKENS = 256.0  # until a reply is seen (used only with a non-zero prior slope)
MAX_SEQUENCES = 100_000.0  # more than any engine runs (a larger value: a corrupt sample)
MAX_MODELS = 1024  # models with a fit (names come from the policy; a bound anyway)
# The fit's exponentially weighted sums: weight, x, y, x^2, x*y; then the mean reply length
# and the fitted slope (NaN: not fitted yet).
_W, _X, _Y, _XX, _XY, _TOKENS, _SLOPE = range(7)


def mean_gap_ms(bucket_counts: Sequence[int]) -> tuple[float, int]:
    """(the mean inter-token gap, ms, by the layout-1 buckets' midpoints; the gaps counted)."""
    total, weighted = 0, 0.0
    for count, gap_ms in zip(bucket_counts, MIDPOINTS_MS, strict=False):
        if count:
            total += count
            weighted += count * gap_ms
    return (weighted / total if total else math.nan), total


class DecodeSlowdown:
    """The decode slow-down and reply length per model."""

    def __init__(self, alpha: float = 0.1) -> None:
        self.alpha = alpha
        self._fits: dict[str, list[float]] = {}

    def observe(self, model: str, beside: float, gap_ms: float, tokens: float) -> bool:
        """One finished reply: its mean gap `gap_ms` over `tokens` output tokens, with
        `beside` sequences running beside it when it joined. False: it teaches nothing."""
        if not (0.0 <= beside <= MAX_SEQUENCES and math.isfinite(gap_ms) and gap_ms >= 0.0):
            return False
        if not tokens > MIN_GAPS:
            return False
        fit = self._fits.get(model)
        if fit is None:
            if len(self._fits) >= MAX_MODELS:  # forget the first learned
                del self._fits[next(iter(self._fits))]
            fit = self._fits[model] = [0.0, 0.0, 0.0, 0.0, 0.0, tokens, math.nan]
        keep, a = 1.0 - self.alpha, self.alpha
        for index, value in ((_W, 1.0), (_X, beside), (_Y, gap_ms), (_XX, beside * beside),
                             (_XY, beside * gap_ms)):  # fmt: skip
            fit[index] = fit[index] * keep + a * value
        fit[_TOKENS] = fit[_TOKENS] * keep + a * tokens
        w = fit[_W]
        mean_x, mean_y = fit[_X] / w, fit[_Y] / w
        spread = fit[_XX] / w - mean_x * mean_x
        if spread >= MIN_SPREAD:
            slope = (fit[_XY] / w - mean_x * mean_y) / spread
            fit[_SLOPE] = min(max(slope, 0.0), MAX_MS_PER_SEQUENCE)
        return True

    def ms_per_sequence(self, model: str) -> float:
        """The learned ms each running sequence adds to an output token (NaN: not yet)."""
        fit = self._fits.get(model)
        return math.nan if fit is None else fit[_SLOPE]

    def output_tokens(self, model: str) -> float:
        """The model's mean reply length, output tokens (the prior while none was seen)."""
        fit = self._fits.get(model)
        return PRIOR_OUTPUT_TOKENS if fit is None else fit[_TOKENS]

    def cost_ms(self, model: str, prior_ms_per_sequence: float) -> float:
        """Milliseconds of decode one running sequence costs a placement beside it: the
        slope (learned, else `prior_ms_per_sequence`) times the mean reply length."""
        slope = self.ms_per_sequence(model)
        if math.isnan(slope):
            slope = prior_ms_per_sequence
        return slope * self.output_tokens(model) if slope > 0.0 else 0.0

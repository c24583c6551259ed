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
joined and its own prompt tokens (its own KV tokens slow its steps too: on the mockers a
5k-token document decodes alone at ~22 ms a token, a 300-token chat at ~7), fitted as
`gap = alone + per_sequence * beside + per_token * prompt_tokens` by exponentially weighted
least squares (each sample weighs `alpha`, older ones decay by `1 - alpha`). A coefficient
is fitted only once the samples differ in its variable (variances MIN_SPREAD sequences^2
and MIN_TOKEN_SPREAD tokens^2, not collinear), each clamped to [0, its maximum];
`per_sequence` is what an average sequence beside adds to each step, `per_token` what each
of a request's own prompt tokens adds to every step of the sequences beside it. One fit per
model (a pool's engines share it: every report teaches it, not one worker's in four), as
the busy cost (`routing.rates`). Reply length: an exponentially weighted mean of the
reports' output tokens (the gaps counted, plus the first token).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kinference.itl_layout import MIDPOINTS_MS

# Variances below which a coefficient is not fitted: samples all taken at one occupancy (or
# one prompt length) cannot tell its effect from the engine's own speed.
MIN_SPREAD = 0.25  # sequences^2
MIN_TOKEN_SPREAD = 256.0**2  # tokens^2
COLLINEAR = 0.05  # 1 - the variables' squared correlation below this: fit the first alone
MAX_MS_PER_SEQUENCE = 50.0  # a larger slope is noise: no engine's step grows that fast
MAX_MS_PER_TOKEN = 0.1  # per prompt token a sequence holds, ms a step (50 ms per 500 tokens)
MIN_GAPS = 4  # a reply of fewer gaps says little of its decode
PRIOR_OUTPUT_TOKENS = 256.0  # until a reply is seen (used only with a non-zero prior)
MAX_SEQUENCES = 100_000.0  # more than any engine runs (a larger value: a corrupt sample)
MAX_TOKENS = 1e8
MAX_MODELS = 1024  # models with a fit (names come from the policy; a bound anyway)
# The fit's exponentially weighted sums: weight, x (beside), z (prompt tokens), y (gap),
# xx, zz, xz, xy, zy; then the mean reply length and the two coefficients (NaN: not fitted).
_SUMS = 9
_TOKENS, _PER_SEQUENCE, _PER_TOKEN = _SUMS, _SUMS + 1, _SUMS + 2


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

    def observe(
        self, model: str, beside: float, prompt_tokens: float, gap_ms: float, tokens: float
    ) -> bool:
        """One finished reply: its mean gap `gap_ms` over `tokens` output tokens, its prompt
        of `prompt_tokens`, with `beside` sequences running beside it when it joined. False:
        it teaches nothing."""
        if not (0.0 <= beside <= MAX_SEQUENCES and 0.0 <= prompt_tokens <= MAX_TOKENS):
            return False
        if not (math.isfinite(gap_ms) and gap_ms >= 0.0 and tokens > MIN_GAPS):
            return False
        fit = self._fits.get(model)
        if fit is None:
            if len(self._fits) >= MAX_MODELS:  # forget the first learned
                del self._fits[next(iter(self._fits))]
            fit = self._fits[model] = [0.0] * _SUMS + [tokens, math.nan, math.nan]
        x, z, y = beside, prompt_tokens, gap_ms
        keep, a = 1.0 - self.alpha, self.alpha
        for index, value in enumerate((1.0, x, z, y, x * x, z * z, x * z, x * y, z * y)):
            fit[index] = fit[index] * keep + a * value
        fit[_TOKENS] = fit[_TOKENS] * keep + a * tokens
        fit[_PER_SEQUENCE], fit[_PER_TOKEN] = _coefficients(fit)
        return True

    def ms_per_sequence(self, model: str) -> float:
        """The learned ms each sequence beside adds to a step (NaN: not yet)."""
        fit = self._fits.get(model)
        return math.nan if fit is None else fit[_PER_SEQUENCE]

    def output_tokens(self, model: str) -> float:
        """The model's mean reply length, output tokens (the prior while none was seen)."""
        fit = self._fits.get(model)
        return PRIOR_OUTPUT_TOKENS if fit is None else fit[_TOKENS]

    def ms_per_token(self, model: str) -> float:
        """The learned ms each prompt token a sequence holds adds to the others' steps
        (NaN: not yet)."""
        fit = self._fits.get(model)
        return math.nan if fit is None else fit[_PER_TOKEN]

    def costs(
        self, model: str, prior_ms_per_sequence: float, prior_ms_per_token: float
    ) -> tuple[float, float]:
        """(per sequence, per sequence and prompt token) the decode one sequence running
        there costs a placement over half a mean reply (`ttft` module), ms; each
        coefficient learned, else its prior."""
        per_sequence, per_token = self.ms_per_sequence(model), self.ms_per_token(model)
        if math.isnan(per_sequence):
            per_sequence = prior_ms_per_sequence
        if math.isnan(per_token):
            per_token = prior_ms_per_token
        half = self.output_tokens(model) / 2.0
        return per_sequence * half, per_token * half


def _coefficients(fit: list[float]) -> tuple[float, float]:
    """(per_sequence, per_token) by least squares on the weighted sums (NaN: not fitted)."""
    w = fit[0]
    mx, mz, my = fit[1] / w, fit[2] / w, fit[3] / w
    vxx, vzz = fit[4] / w - mx * mx, fit[5] / w - mz * mz
    vxz, vxy, vzy = fit[6] / w - mx * mz, fit[7] / w - mx * my, fit[8] / w - mz * my
    spread_x, spread_z = vxx >= MIN_SPREAD, vzz >= MIN_TOKEN_SPREAD
    det = vxx * vzz - vxz * vxz
    if spread_x and spread_z and det >= COLLINEAR * vxx * vzz:
        per_sequence = (vxy * vzz - vzy * vxz) / det
        per_token = (vzy * vxx - vxy * vxz) / det
    elif spread_x:
        per_sequence, per_token = vxy / vxx, math.nan
    elif spread_z:
        per_sequence, per_token = math.nan, vzy / vzz
    else:
        return math.nan, math.nan
    return _clamp(per_sequence, MAX_MS_PER_SEQUENCE), _clamp(per_token, MAX_MS_PER_TOKEN)


def _clamp(value: float, most: float) -> float:
    return value if math.isnan(value) else min(max(value, 0.0), most)

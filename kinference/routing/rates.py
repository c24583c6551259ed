"""Per-worker, per-model service rates learned online from the reports (the TTFT model's).

Three quantities per (model, worker slot), NaN until learned:
- `prefill_ms_per_token` and `prefill_base_ms`: observed TTFT of requests that found no
  queue ahead of them, against their uncached prompt tokens (reported `prompt_tokens -
  cached_tokens`), fitted as `base + tokens * per_token` by exponentially weighted least
  squares (each sample weighs `alpha`, older ones decay by `1 - alpha`), the prior's
  fixed cost counted as PRIOR_SAMPLES samples of 0 tokens before the first (one slow first
  request, or one taken beside a batch, does not set a worker's fixed cost); while the
  samples' lengths hardly differ, `base` is the prior's and the rest is per-token cost.
  The slope is bounded below by what the long prompts (>= MIN_TOKENS_FOR_SLOPE uncached
  tokens) showed over the fixed cost learned when each came: their TTFT beyond that base,
  per token, a token-weighted mean (`slope_floor`). Delays that do not grow with the prompt
  (event-loop lag, a queue the model did not see) lengthen short and long prompts alike, but
  not at the same moments: when they hit the short ones more, the least-squares line
  flattens toward 0 and a 12k-token prompt was predicted like a 48-token one (h100, h101);
  against the concurrent base, a long prompt still shows its per-token cost, and the base
  takes the delay;
- `service_ms`: milliseconds from first token to final report (how long a request holds
  a batch slot), an exponentially weighted mean with the prior counted as PRIOR_SAMPLES
  samples before the first, fading alike (a warm-up's 2-token request served in 14 ms
  set a worker's service time, and through the peers' mean every unlearned worker's, to
  14 ms: arrivals by Little's law 100x too many, batch-slot waits 100x too short, h136);

and per model (its engines alike), `busy_ms`: what each sequence running beside a request
adds to its TTFT (an engine's step decodes every running sequence along with the new
prompt's prefill, so steps, and the first token, take longer on a fuller batch): the TTFT
beyond the predicted queue and prefill, against the sequences the request joined, fitted
through the origin by the same exponentially weighted least squares (the prefill samples
are net of it).

Samples come from this replica's reports and, in a cluster, from every other replica's
(`Router.remote_served` and `Router.remote_busy` fold theirs), so every replica learns the
same rates.
"""

from __future__ import annotations

import math

import numpy as np

from kinference.routing.samples import is_sample
from kinference.routing.scorers.ttft_config import TtftConfig
from kinference.routing.table import FloatArray, IndexArray

MIN_SPREAD_TOKENS = 64.0  # below this spread of uncached tokens the slope is not refitted
# Without spread, samples this short (mean uncached tokens) leave the slope alone: their
# time is scheduling and fixed cost, and 30 ms over 10 tokens is no 3 ms per token.
MIN_TOKENS_FOR_SLOPE = 256.0
# Samples the prior's fixed cost counts as in a worker's fit (and the prior service time in
# its mean), a tenth (`alpha`) each, fading as the worker's own come: one sample does not
# set it (h116: a first request of 9 tokens at 45 ms, its peers' 20-24 ms, priced that fast
# engine out of every pick; a 5.3k document and a 306-token hit slowed by a sequence beside
# it, a 60.8 ms base on a ~20 ms engine).
PRIOR_SAMPLES = 2.0
MAX_MS_PER_TOKEN = 10.0  # 100 tokens/s: slower than any engine; a fit past it is noise
MAX_BASE_MS = 10_000.0
# What one running sequence can add to a TTFT, at most (ms): a larger fit is a queue the
# model did not see, not the cost of sharing the engine's steps.
MAX_BUSY_MS = 50.0
# Sequences beside a request that a sample may claim: more than any engine runs (a larger
# value, say from a corrupt stream entry, would overflow the fit's sums).
MAX_BUSY_SEQUENCES = 100_000.0
MAX_BUSY_MODELS = 1024  # models with a busy fit (names come from the policy; a bound anyway)


def busy_sample(sequences: float, excess_ms: float) -> tuple[float, float] | None:
    """A busy sample as the fit takes it: `excess_ms` within MAX_BUSY_MS a sequence either
    way (more is a queue the model did not see; less, a prefill misread), or None when it
    says nothing (under one sequence beside the request, more than any engine runs, NaN)."""
    if not (1.0 <= sequences <= MAX_BUSY_SEQUENCES and math.isfinite(excess_ms)):
        return None
    bound = MAX_BUSY_MS * sequences
    return sequences, min(max(excess_ms, -bound), bound)


# Exponentially weighted sums per slot: weight, x, y, x^2, x*y; and of the long prompts'
# TTFT beyond the base learned when each came, and of their tokens (`slope_floor`).
_SUMS = ("w", "x", "y", "xx", "xy", "beyond", "long")


def _spread_slope(w: float, sx: float, sy: float, sxx: float, sxy: float) -> float | None:
    """The least-squares slope of the sums, clamped to [0, MAX_MS_PER_TOKEN], where the
    prompts' lengths differ enough to fit one (variance >= MIN_SPREAD_TOKENS^2); else None."""
    mean_x, mean_y = sx / w, sy / w
    var = sxx / w - mean_x * mean_x
    if var < MIN_SPREAD_TOKENS**2:
        return None
    return min(max((sxy / w - mean_x * mean_y) / var, 0.0), MAX_MS_PER_TOKEN)


def _base(mean_x: float, mean_y: float, per_token: float) -> float:
    """The fixed cost the samples' means leave under `per_token`, within [0, MAX_BASE_MS]."""
    return min(max(mean_y - per_token * mean_x, 0.0), MAX_BASE_MS)


def _fitted_base(w: float, sx: float, sy: float, sxx: float, sxy: float) -> float:
    """The fixed cost as the least-squares line of the sums has it (its slope clamped at 0,
    the floor not applied: measured against a base the floor lowered, a long prompt would
    keep any floor), from prompts of different lengths or from short ones; NaN when the
    base would be the prior's (no sample yet, or all alike and long): a long prompt's time
    past a prior base would be the prior's error per token."""
    if w <= 0.0:
        return float("nan")
    mean_x, mean_y = sx / w, sy / w
    fitted = _spread_slope(w, sx, sy, sxx, sxy)
    if fitted is not None:
        return _base(mean_x, mean_y, fitted)
    return mean_y if mean_x < MIN_TOKENS_FOR_SLOPE else float("nan")


def slope_floor(beyond: float, long: float) -> float:
    """The per-token cost the long prompts showed: their TTFT beyond the concurrent base
    over their tokens, both summed (weighted by tokens: a 12k prompt's says more than a
    300's); NaN while no long prompt was seen."""
    return beyond / long if long > 0.0 else float("nan")


class Rates:
    """Learned rates per model, as arrays indexed by worker slot."""

    def __init__(self, config: TtftConfig | None = None) -> None:
        """Priors and learning rate from `config` (the policy's `routing: ttft:`; its
        defaults when None): `configure`."""
        self.configure(TtftConfig() if config is None else config)
        self._arrays: dict[tuple[str, str], FloatArray] = {}  # (model, quantity) -> per slot
        self._sums: dict[str, FloatArray] = {}  # model -> the fit's sums (rows) per slot
        # model -> the busy fit: its weighted sums of sequences^2 and of sequences x excess,
        # and the fitted milliseconds a sequence (one for the model's engines: a pool's
        # engines share it, and each report teaches it, not only one worker's in four).
        self._busy: dict[str, tuple[float, float, float]] = {}

    def configure(self, config: TtftConfig) -> None:
        """Take the TTFT model's priors and learning rate (on load and on every reload;
        what was learned stays)."""
        self.alpha = config.learning_rate  # the weight of a new sample
        # The fixed cost assumed when every sample has the same prompt length (the fit
        # cannot tell fixed from per-token cost then).
        self.prior_base_ms = config.prior_prefill_base_ms
        # Milliseconds a running sequence adds to a TTFT until learned.
        self.prior_busy_ms = config.prior_busy_ms_per_sequence
        # Milliseconds a prompt token takes to prefill until learned.
        self.prior_ms_per_token = 1000.0 / config.prior_prefill_tokens_per_s
        # Milliseconds a request holds its batch slot until learned.
        self.prior_service_ms = config.prior_service_ms

    def values(self, model: str, quantity: str, slots: IndexArray, size: int) -> FloatArray:
        """`quantity` for the slots (NaN where not learned); `size` is the table's."""
        return self._array(model, quantity, size)[slots]

    def peek(self, model: str, quantity: str) -> FloatArray | None:
        """The whole per-slot array of `quantity` (NaN where not learned), None if nothing
        was ever learned of it; it may be shorter than the table. Read only."""
        return self._arrays.get((model, quantity))

    def learned(self, model: str, quantity: str, slot: int) -> float:
        array = self._arrays.get((model, quantity))
        return float("nan") if array is None or slot >= len(array) else float(array[slot])

    def observe_prefill(
        self, slot: int, model: str, uncached_tokens: float, ttft_ms: float
    ) -> None:
        """One request's TTFT without queueing ahead, against its uncached prompt tokens
        (none that a report cannot carry: `samples`)."""
        if not (is_sample(uncached_tokens) and is_sample(ttft_ms)):
            return
        size = slot + 1
        keep, a = 1.0 - self.alpha, self.alpha
        x, y = uncached_tokens, ttft_ms
        sums = self._sums_of(model, size)
        slope = self._array(model, "prefill_ms_per_token", size)
        base = self._array(model, "prefill_base_ms", size)
        # On Python floats (numpy's fixed cost per call dominates five numbers): the same
        # two roundings per sum as the in-place array operations, so the same values.
        old = sums[:, slot].tolist()
        w, sx, sy, sxx, sxy = (
            value * keep + more
            for value, more in zip(old[:5], (a, a * x, a * y, a * x * x, a * x * y), strict=True)
        )
        beyond, long = old[5:]
        fixed = _fitted_base(*old[:5])  # before this sample, as the least squares see it
        if x >= MIN_TOKENS_FOR_SLOPE and not math.isnan(fixed):  # its time past the base
            beyond = beyond * keep + a * min(max(y - fixed, 0.0), MAX_MS_PER_TOKEN * x)
            long = long * keep + a * x
        sums[:, slot] = [w, sx, sy, sxx, sxy, beyond, long]
        floor = slope_floor(beyond, long)
        # The fit counts the prior's fixed cost as PRIOR_SAMPLES samples of 0 tokens taken
        # before the worker's first (decayed since as the others: `a * (1 - w)` each).
        prior = PRIOR_SAMPLES * a * max(1.0 - w, 0.0)
        fw, fy = w + prior, sy + prior * self.prior_base_ms
        mean_x, mean_y = sx / fw, fy / fw
        fitted = _spread_slope(fw, sx, fy, sxx, sxy)
        if fitted is not None:  # prompts of different lengths (or the prior's 0): fit both
            if not math.isnan(floor):  # flattened by delays that hit the short ones more
                fitted = max(fitted, floor)
            slope[slot] = fitted
            base[slot] = _base(mean_x, mean_y, fitted)
        elif (own_x := sx / w) >= MIN_TOKENS_FOR_SLOPE:  # all alike and long: the prior's base
            own_y = sy / w  # the worker's own samples' mean TTFT, the prior's left out
            fixed = min(self.prior_base_ms, own_y)
            base[slot] = fixed
            slope[slot] = min((own_y - fixed) / own_x, MAX_MS_PER_TOKEN)
        else:  # short prompts say nothing of the per-token cost: it is all fixed cost
            learned = slope.item(slot)
            base[slot] = _base(mean_x, mean_y, 0.0 if math.isnan(learned) else learned)

    def prefill_ms(self, slot: int, model: str, uncached_tokens: float) -> float:
        """The learned prefill of `uncached_tokens` on the worker (NaN: not learned)."""
        base = self.learned(model, "prefill_base_ms", slot)
        slope = self.learned(model, "prefill_ms_per_token", slot)
        return base + (0.0 if math.isnan(slope) else slope * uncached_tokens)

    def ms_per_token(self, slot: int, model: str) -> float:
        """The worker's learned prefill milliseconds a token, else the prior."""
        learned = self.learned(model, "prefill_ms_per_token", slot)
        return self.prior_ms_per_token if math.isnan(learned) else learned

    def busy_ms(self, model: str, prior: float | None = None) -> float:
        """Milliseconds one running sequence adds to a TTFT on the model's engines: learned,
        else `prior` (default: the policy's, `prior_busy_ms`)."""
        fitted = self._busy.get(model)
        if fitted is not None:
            return fitted[2]
        return self.prior_busy_ms if prior is None else prior

    def learned_busy(self, model: str) -> float:
        """The learned busy milliseconds a sequence of `model` (NaN: the prior in use)."""
        fitted = self._busy.get(model)
        return float("nan") if fitted is None else fitted[2]

    def observe_busy(self, model: str, sequences: float, excess_ms: float) -> bool:
        """One request's TTFT beyond its predicted queue and prefill (`excess_ms`, may be
        negative), against the `sequences` running beside it when it joined (>= 1).
        False when it teaches nothing (no sequence beside it, or not a number)."""
        sample = busy_sample(sequences, excess_ms)
        if sample is None:
            return False
        sequences, excess = sample
        keep, a = 1.0 - self.alpha, self.alpha
        fitted = self._busy.get(model)
        if fitted is None and len(self._busy) >= MAX_BUSY_MODELS:  # forget the first learned
            del self._busy[next(iter(self._busy))]
        squares, products, _ = (0.0, 0.0, 0.0) if fitted is None else fitted
        squares = squares * keep + a * sequences * sequences
        products = products * keep + a * sequences * excess
        self._busy[model] = (squares, products, min(max(products / squares, 0.0), MAX_BUSY_MS))
        return True

    def observe_service(self, slot: int, model: str, service_ms: float) -> None:
        """How long one request held its batch slot after its first token: into the mean,
        whose weight (`service_weight`) starts at the prior's PRIOR_SAMPLES samples (none
        that a report cannot carry: `samples`)."""
        if not is_sample(service_ms):
            return
        array = self._array(model, "service_ms", slot + 1)
        weights = self._array(model, "service_weight", slot + 1)
        old, weight, a = array.item(slot), weights.item(slot), self.alpha
        if math.isnan(old) or math.isnan(weight):
            old, weight = self.prior_service_ms, PRIOR_SAMPLES * a
        kept = (1.0 - a) * weight
        weights[slot] = kept + a
        array[slot] = (kept * old + a * service_ms) / (kept + a)

    def forget(self, slot: int) -> None:
        """A worker left: what was learned of it no longer applies to its slot."""
        for array in self._arrays.values():
            if slot < len(array):
                array[slot] = np.nan
        for sums in self._sums.values():
            if slot < sums.shape[1]:
                sums[:, slot] = 0.0

    def _sums_of(self, model: str, size: int) -> FloatArray:
        """The fit's weighted sums of `model`, one row per name of `_SUMS`, a column per slot."""
        sums = self._sums.get(model)
        if sums is None or sums.shape[1] < size:
            width = max(size, 64, 2 * (0 if sums is None else sums.shape[1]))
            grown = np.zeros((len(_SUMS), width))
            if sums is not None:
                grown[:, : sums.shape[1]] = sums
            sums = self._sums[model] = grown
        return sums

    def _array(self, model: str, quantity: str, size: int, fill: float = np.nan) -> FloatArray:
        key = (model, quantity)
        array = self._arrays.get(key)
        if array is None or len(array) < size:
            grown = np.full(max(size, 64, 2 * (0 if array is None else len(array))), fill)
            if array is not None:
                grown[: len(array)] = array
            array = self._arrays[key] = grown
        return array

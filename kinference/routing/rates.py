"""Per-worker, per-model service rates learned online from the reports (the TTFT model's).

Three quantities per (model, worker slot), NaN until learned:
- `prefill_ms_per_token` and `prefill_base_ms`: observed TTFT of requests that found no
  queue ahead of them, against their uncached prompt tokens (reported `prompt_tokens -
  cached_tokens`), fitted as `base + tokens * per_token` by exponentially weighted least
  squares (each sample weighs `alpha`, older ones decay by `1 - alpha`); while the samples'
  lengths hardly differ, `base` is the prior's and the rest is taken as per-token cost;
- `service_ms`: milliseconds from first token to final report (how long a request holds
  a batch slot), an exponentially weighted mean;

until final reports can set a worker's slope (long or varied prompts; the first comes
seconds into its life), a provisional prefill fit: its first tokens' samples
(`routing.first_prefill`) folded into the fit beside its final reports' (a readiness
probe's short report gives the fixed cost), its slope never above the prior's (a first
token is the earliest sign of a queue or a busy host the model did not see); the final
reports' own fit replaces it as soon as it sets the slope;

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

from kinference.routing.table import FloatArray, IndexArray

MIN_SPREAD_TOKENS = 64.0  # below this spread of uncached tokens the slope is not refitted
# Without spread, samples this short (mean uncached tokens) leave the slope alone: their
# time is scheduling and fixed cost, and 30 ms over 10 tokens is no 3 ms per token.
MIN_TOKENS_FOR_SLOPE = 256.0
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


# Exponentially weighted sums per slot: weight, x, y, x^2, x*y.
_SUMS = ("w", "x", "y", "xx", "xy")


class Rates:
    """Learned rates per model, as arrays indexed by worker slot."""

    def __init__(
        self, alpha: float = 0.1, prior_base_ms: float = 15.0, prior_busy_ms: float = 0.0
    ) -> None:
        self.alpha = alpha
        # The fixed cost assumed when every sample has the same prompt length (the fit
        # cannot tell fixed from per-token cost then); set from the policy's prior.
        self.prior_base_ms = prior_base_ms
        # Milliseconds a running sequence adds to a TTFT until learned (the policy's prior).
        self.prior_busy_ms = prior_busy_ms
        # Milliseconds a prompt token takes to prefill until learned (the policy's prior).
        self.prior_ms_per_token = 0.1
        self._arrays: dict[tuple[str, str], FloatArray] = {}  # (model, quantity) -> per slot
        self._sums: dict[str, FloatArray] = {}  # model -> the fit's sums (rows) per slot
        # model -> the provisional samples' sums per slot (all 0 where none is in force)
        self._first: dict[str, FloatArray] = {}
        # model -> the busy fit: its weighted sums of sequences^2 and of sequences x excess,
        # and the fitted milliseconds a sequence (one for the model's engines: a pool's
        # engines share it, and each report teaches it, not only one worker's in four).
        self._busy: dict[str, tuple[float, float, float]] = {}

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
        """One request's TTFT without queueing ahead, against its uncached prompt tokens."""
        size = slot + 1
        keep = 1.0 - self.alpha
        sums = self._sums_of(model, size)
        # On Python floats (numpy's fixed cost per call dominates five numbers): the same
        # two roundings per sum as the in-place array operations, so the same values.
        added = self._sample(uncached_tokens, ttft_ms)
        row = [old * keep + more for old, more in zip(sums[:, slot].tolist(), added, strict=True)]
        sums[:, slot] = row
        first = self._first.get(model)
        if first is not None and slot < first.shape[1] and first.item(0, slot) > 0.0:
            if not _sets_slope(row):  # the provisional fit stays, with this sample in it
                self._fit(
                    slot,
                    model,
                    [f + r for f, r in zip(first[:, slot].tolist(), row, strict=True)],
                    provisional=True,
                )
                return
            first[:, slot] = 0.0  # the final reports' fit replaces it from now on
        self._fit(slot, model, row)

    def observe_first(self, slot: int, model: str, samples: list[tuple[float, float]]) -> bool:
        """The worker's provisional samples (uncached tokens, net TTFT), oldest first, in
        place of those given before; False (nothing changed) once its final reports set
        the slope, or while these (with its final ones) cannot set it."""
        final = self._sums_of(model, slot + 1)[:, slot].tolist()
        if _sets_slope(final) or not samples:
            return False
        keep, row = 1.0 - self.alpha, [0.0] * len(_SUMS)
        for tokens, ttft_ms in samples:
            added = self._sample(tokens, ttft_ms)
            row = [old * keep + more for old, more in zip(row, added, strict=True)]
        combined = [f + r for f, r in zip(final, row, strict=True)]
        if not _sets_slope(combined):
            return False
        first = self._first.get(model)
        if first is None or first.shape[1] <= slot:
            first = self._first[model] = _grown(first, slot + 1)
        first[:, slot] = row
        self._fit(slot, model, combined, provisional=True)
        return True

    def final_slope(self, slot: int, model: str) -> bool:
        """Whether the worker's final reports set its slope (no provisional fit then)."""
        sums = self._sums.get(model)
        return sums is not None and slot < sums.shape[1] and _sets_slope(sums[:, slot].tolist())

    def _sample(self, uncached_tokens: float, ttft_ms: float) -> tuple[float, ...]:
        """One sample's weighted terms of the sums (`_SUMS`)."""
        a, x, y = self.alpha, max(uncached_tokens, 0.0), max(ttft_ms, 0.0)
        return (a, a * x, a * y, a * x * x, a * x * y)

    def _fit(self, slot: int, model: str, row: list[float], provisional: bool = False) -> None:
        """Set the worker's slope and fixed cost from the fit's sums `row`; a provisional
        fit's slope is at most the prior's."""
        size = slot + 1
        w, sx, sy, sxx, sxy = row
        mean_x, mean_y = sx / w, sy / w
        var = sxx / w - mean_x * mean_x
        slope = self._array(model, "prefill_ms_per_token", size)
        base = self._array(model, "prefill_base_ms", size)
        most = self.prior_ms_per_token if provisional else MAX_MS_PER_TOKEN
        if var >= MIN_SPREAD_TOKENS**2:  # prompts of different lengths: fit both
            fitted = min(max((sxy / w - mean_x * mean_y) / var, 0.0), most)
            slope[slot] = fitted
            base[slot] = min(max(mean_y - fitted * mean_x, 0.0), MAX_BASE_MS)
        elif mean_x >= MIN_TOKENS_FOR_SLOPE:  # all alike and long: fixed cost as the prior's
            fixed = min(self.prior_base_ms, mean_y)
            base[slot] = fixed
            slope[slot] = min((mean_y - fixed) / mean_x, most)
        else:  # short prompts say nothing of the per-token cost: it is all fixed cost
            learned = slope.item(slot)
            per_token = 0.0 if math.isnan(learned) else learned
            base[slot] = min(max(mean_y - per_token * mean_x, 0.0), MAX_BASE_MS)

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
        """How long one request held its batch slot after its first token."""
        array = self._array(model, "service_ms", slot + 1)
        old = array.item(slot)
        value = max(service_ms, 0.0)
        array[slot] = value if math.isnan(old) else (1 - self.alpha) * old + self.alpha * value

    def forget(self, slot: int) -> None:
        """A worker left: what was learned of it no longer applies to its slot."""
        for array in self._arrays.values():
            if slot < len(array):
                array[slot] = np.nan
        for sums in (*self._sums.values(), *self._first.values()):
            if slot < sums.shape[1]:
                sums[:, slot] = 0.0

    def _sums_of(self, model: str, size: int) -> FloatArray:
        """The fit's weighted sums of `model`, one row per name of `_SUMS`, a column per slot."""
        sums = self._sums.get(model)
        if sums is None or sums.shape[1] < size:
            sums = self._sums[model] = _grown(sums, size)
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


def _grown(sums: FloatArray | None, size: int) -> FloatArray:
    """`sums` (rows `_SUMS`, a column per slot) widened to at least `size` slots."""
    width = max(size, 64, 2 * (0 if sums is None else sums.shape[1]))
    grown = np.zeros((len(_SUMS), width))
    if sums is not None:
        grown[:, : sums.shape[1]] = sums
    return grown


def _sets_slope(row: list[float]) -> bool:
    """Whether a fit's sums set the per-token cost: prompts of different lengths, or
    alike and long (`Rates._fit`); none (weight 0) does not."""
    w, sx, _, sxx, _ = row
    if w <= 0.0:
        return False
    mean_x = sx / w
    return sxx / w - mean_x * mean_x >= MIN_SPREAD_TOKENS**2 or mean_x >= MIN_TOKENS_FOR_SLOPE

"""Weighted scorers over candidate workers, computed as vectors.

Each scorer maps the candidates to [0, 1] (higher is better); the choice is the highest
weighted sum, ties broken at random. Unknown signals score as the candidates' typical value
(0.5 when nothing is known), so a worker that was never scraped is neither favoured nor
shunned. When load is far out of balance, prefix
affinity is switched off for that pick (load wins), as sglang-router's balance override
does: affinity must not pile a popular prompt onto one worker.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from kinference.routing.features import Features, Signals
from kinference.routing.scoring_small import small_scores
from kinference.routing.table import FloatArray, IndexArray, WorkerTable

__all__ = ["NEUTRAL", "Balance", "Features", "Scored", "Signals", "Weights", "choose", "load_of"]

NEUTRAL = 0.5
_TIE = 1e-9  # scores closer than this are a tie
# Up to this many candidates, scores are computed on Python floats (`scoring_small`): numpy's
# per-call overhead outweighs its vector speed on a handful of workers. The two give the
# same scores (tests check it).
SMALL_CANDIDATES = 16


@dataclass(frozen=True, slots=True)
class Weights:
    prefix: float = 3.0
    queue: float = 2.0
    kv_cache: float = 2.0
    latency: float = 1.0
    lora: float = 1.0


@dataclass(frozen=True, slots=True)
class Balance:
    """Load imbalance (in-flight + queued) past which affinity is ignored.

    With `fade`, a candidate's affinity shrinks with its own excess load instead: by
    1/abs_threshold per request it carries over the idlest candidate (once past
    rel_threshold times the idlest's load), to nothing at abs_threshold requests over.
    """

    abs_threshold: float = 16.0
    rel_threshold: float = 1.5
    fade: bool = False


@dataclass(frozen=True, slots=True)
class Scored:
    """The winner's position among the candidates, and why, for logs and tests."""

    index: int
    prefix_blocks: int
    affinity_overridden: bool


def load_of(table: WorkerTable, slots: IndexArray, signals: Signals) -> FloatArray:
    """Requests on each worker: picks in flight plus the engine's own queue when known."""
    return table.inflight[slots] + np.fmax(signals.waiting[slots], 0.0)  # NaN: nothing queued


def choose(
    table: WorkerTable,
    slots: IndexArray,
    *,
    model: str,
    signals: Signals,
    prefix_blocks: FloatArray,
    total_blocks: int,
    weights: Weights,
    balance: Balance,
    rng: random.Random,
) -> Scored:
    """Score every candidate slot and pick the best; `prefix_blocks[i]` is slot i's match."""
    if len(slots) == 1:
        return Scored(0, int(prefix_blocks[0]) if total_blocks else 0, False)
    features = Features(table, slots, model, signals, prefix_blocks, total_blocks)
    if len(slots) <= SMALL_CANDIDATES:
        scores, overridden = small_scores(features, weights, balance)
        top = max(scores)
        ties = [i for i, score in enumerate(scores) if score >= top - _TIE]
    else:
        vector, overridden = vector_scores(features, weights, balance)
        ties = np.flatnonzero(vector >= vector.max() - _TIE).tolist()
    index = ties[0] if len(ties) == 1 else rng.choice(ties)
    return Scored(index, int(prefix_blocks[index]) if total_blocks else 0, overridden)


def vector_scores(f: Features, weights: Weights, balance: Balance) -> tuple[FloatArray, bool]:
    """The weighted score of every candidate, as numpy vectors (for many candidates)."""
    load = load_of(f.table, f.slots, f.signals)
    low, high = float(load.min()), float(load.max())
    overridden = high - low > balance.abs_threshold and high > balance.rel_threshold * low
    score = weights.queue * (np.ones_like(load) if high <= low else (high - load) / (high - low))
    kv = f.signals.kv_usage[f.slots]
    if weights.kv_cache and not np.isnan(kv).all():
        score += weights.kv_cache * _known_or_typical(1.0 - kv)
    if weights.latency:
        score += weights.latency * _latency(f.table, f.slots, f.model)
    lora = f.table.lora_mask(f.model)
    if weights.lora and lora is not None:
        score += weights.lora * lora[f.slots]
    if f.total_blocks and balance.fade:
        full = f.prefix_blocks / f.total_blocks
        affinity = full * _fade(load, low, balance)
        score += weights.prefix * affinity
        overridden = bool(((full > 0) & (affinity < full)).any())
    elif f.total_blocks and not overridden:
        score += weights.prefix * (f.prefix_blocks / f.total_blocks)
    return score, overridden


def _fade(load: FloatArray, low: float, balance: Balance) -> FloatArray:
    """Share of its affinity each candidate keeps under `Balance.fade`."""
    excess = load - low
    if balance.abs_threshold <= 0:
        kept = (excess <= 0).astype(np.float64)
    else:
        kept = np.clip(1.0 - excess / balance.abs_threshold, 0.0, 1.0)
    return np.where(load > balance.rel_threshold * low, kept, 1.0)


def _known_or_typical(values: FloatArray) -> FloatArray:
    """Unknown values score as the candidates' known average (neutral if none is known),
    so a worker is neither favoured nor shunned for lacking metrics."""
    unknown = np.isnan(values)
    if not unknown.any():
        return np.clip(values, 0.0, 1.0)
    typical = float(values[~unknown].mean()) if not unknown.all() else NEUTRAL
    return np.where(unknown, typical, np.clip(values, 0.0, 1.0))


def _latency(table: WorkerTable, slots: IndexArray, model: str) -> FloatArray:
    """Predicted time to first token plus a typical 64-token decode, best = 1."""
    ttft = table.ttft_ms(model)[slots]
    known = ~np.isnan(ttft)
    if not known.any():
        return np.full(len(slots), NEUTRAL)
    itl = table.itl_ms(model)[slots]
    itl_known = ~np.isnan(itl)
    typical_itl = float(itl[itl_known].mean()) if itl_known.any() else 0.0  # unknown: typical
    predicted = ttft + 64 * np.where(itl_known, itl, typical_itl)
    best = max(float(predicted[known].min()), 1.0)
    return np.where(known, best / np.maximum(predicted, 1.0), NEUTRAL)

"""The scorers of `scoring` on Python floats, for a handful of candidates.

Same formulas, same order of operations as `scoring.vector_scores`, so both give the same
scores; this one avoids numpy's fixed cost per call, which dominates below ~16 workers.
"""

from __future__ import annotations

from math import isnan
from typing import TYPE_CHECKING

from kinference.routing.features import Features
from kinference.routing.table import FloatArray

if TYPE_CHECKING:
    from kinference.routing.scoring import Balance, Weights

NEUTRAL = 0.5  # as scoring.NEUTRAL
DECODE_TOKENS = 64  # as in scoring._latency: a typical decode after the first token


def small_scores(f: Features, weights: Weights, balance: Balance) -> tuple[list[float], bool]:
    """The weighted score of every candidate, and whether affinity was overridden."""
    slots = f.slots.tolist()  # element reads below beat a fancy index per array here
    waiting = _values(f.signals.waiting, slots)
    load = [
        busy + (queued if queued > 0 else 0.0)  # NaN or negative: nothing queued
        for busy, queued in zip(_values(f.table.inflight, slots), waiting, strict=True)
    ]
    low, high = min(load), max(load)
    overridden = high - low > balance.abs_threshold and high > balance.rel_threshold * low
    spread = high - low
    score = [weights.queue * (1.0 if high <= low else (high - x) / spread) for x in load]
    if weights.kv_cache:
        _add(score, weights.kv_cache, _kv_scores(_values(f.signals.kv_usage, slots)))
    if weights.latency:
        _add(score, weights.latency, _latency_scores(f, slots))
    lora = f.table.lora_mask(f.model)
    if weights.lora and lora is not None:
        _add(score, weights.lora, [1.0 if lora.item(slot) else 0.0 for slot in slots])
    if f.total_blocks and balance.fade:
        full = [b / f.total_blocks for b in f.prefix_blocks.tolist()]
        affinity = [a * k for a, k in zip(full, _fade(load, low, balance), strict=True)]
        _add(score, weights.prefix, affinity)
        overridden = any(b > 0 and a < b for a, b in zip(affinity, full, strict=True))
    elif f.total_blocks and not overridden:
        blocks = f.prefix_blocks.tolist()
        _add(score, weights.prefix, [b / f.total_blocks for b in blocks])
    return score, overridden


def _fade(load: list[float], low: float, balance: Balance) -> list[float]:
    """As scoring._fade: the share of its affinity each candidate keeps."""
    threshold, floor = balance.abs_threshold, balance.rel_threshold * low
    if threshold <= 0:
        kept = [1.0 if x - low <= 0 else 0.0 for x in load]
    else:
        kept = [min(max(1.0 - (x - low) / threshold, 0.0), 1.0) for x in load]
    return [k if x > floor else 1.0 for k, x in zip(kept, load, strict=True)]


def _add(score: list[float], weight: float, values: list[float] | None) -> None:
    if values is not None:
        for i, value in enumerate(values):
            score[i] += weight * value


def _kv_scores(kv_usage: list[float]) -> list[float] | None:
    """1 - KV use, clipped to [0, 1]; unknown as the known average. None if all unknown."""
    free = [1.0 - used for used in kv_usage]
    known = [value for value in free if not isnan(value)]
    if not known:
        return None
    typical = _mean(known)
    return [typical if isnan(value) else min(max(value, 0.0), 1.0) for value in free]


def _values(array: FloatArray, slots: list[int]) -> list[float]:
    return [array.item(slot) for slot in slots]


def _latency_scores(f: Features, slots: list[int]) -> list[float]:
    ttft = _values(f.table.ttft_ms(f.model), slots)
    if all(isnan(value) for value in ttft):
        return [NEUTRAL] * len(ttft)
    itl = _values(f.table.itl_ms(f.model), slots)
    itl_known = [value for value in itl if not isnan(value)]
    typical_itl = _mean(itl_known) if itl_known else 0.0
    predicted = [
        first + DECODE_TOKENS * (typical_itl if isnan(gap) else gap)
        for first, gap in zip(ttft, itl, strict=True)
    ]
    best = max(min(p for p, first in zip(predicted, ttft, strict=True) if not isnan(first)), 1.0)
    return [
        NEUTRAL if isnan(first) else best / max(p, 1.0)
        for p, first in zip(predicted, ttft, strict=True)
    ]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)

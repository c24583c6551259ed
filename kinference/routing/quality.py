"""How good the predictions are: predicted against observed, over a sliding window.

Two windows: TTFT (the TTFT model's estimate against the reported first token) and cached
tokens (the prefix source's prediction against the engine's reported `cached_tokens`).
Each answers mean absolute error, mean signed error (bias) and Pearson correlation.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from math import sqrt

WINDOW = 1024  # pairs kept per window (the most recent)


@dataclass(frozen=True, slots=True)
class Summary:
    count: int
    mean_abs_error: float
    bias: float  # mean of predicted - observed
    correlation: float  # Pearson; NaN when either side is constant or the window empty


class ErrorWindow:
    """The last `size` (predicted, observed) pairs."""

    def __init__(self, size: int = WINDOW) -> None:
        self._pairs: deque[tuple[float, float]] = deque(maxlen=size)

    def add(self, predicted: float, observed: float) -> None:
        self._pairs.append((predicted, observed))

    def summary(self) -> Summary:
        pairs = list(self._pairs)
        count = len(pairs)
        if not count:
            return Summary(0, float("nan"), float("nan"), float("nan"))
        errors = [p - o for p, o in pairs]
        mae = sum(abs(e) for e in errors) / count
        bias = sum(errors) / count
        return Summary(count, mae, bias, _correlation(pairs))


def _correlation(pairs: list[tuple[float, float]]) -> float:
    count = len(pairs)
    mean_p = sum(p for p, _ in pairs) / count
    mean_o = sum(o for _, o in pairs) / count
    cov = sum((p - mean_p) * (o - mean_o) for p, o in pairs)
    var_p = sum((p - mean_p) ** 2 for p, _ in pairs)
    var_o = sum((o - mean_o) ** 2 for _, o in pairs)
    if var_p <= 0 or var_o <= 0:
        return float("nan")
    return cov / sqrt(var_p * var_o)


@dataclass(slots=True)
class PredictionQuality:
    ttft_ms: ErrorWindow
    cached_tokens: ErrorWindow

    @classmethod
    def empty(cls) -> PredictionQuality:
        return cls(ErrorWindow(), ErrorWindow())

"""Characters of prompt text per token, learned per model from what the engines report.

The picker has no tokenizer at Pick: it counts the prompt's text (characters, UTF-8 bytes
for text referenced by digest, `requests.prompt`) and divides. English prose under a large
vocabulary is about 4 characters a token (`CHARS_PER_TOKEN`, the prior), but a small
vocabulary, code, or another script can be far from it: Dynamo's mock engines' tokenizer
makes ~1.6. An estimate off by 2.5x puts every prefill estimate, every conversion of a
reported `cached_tokens` to prefix blocks and the learned cache capacity off by as much.

Each ReportFinalToken of a complete prompt is a sample: the text characters measured at
Pick over the reported `prompt_tokens` less the fixed per-message and media estimates.
The ratio in force per model is the median of its last `WINDOW` samples, once there are
`MIN_SAMPLES` (a single odd report, say a truncated prompt or a wrong usage block, moves
a median little); the prior until then. Samples outside `[MIN_RATIO, MAX_RATIO]` are no
tokenizer's and are dropped, as are prompts too short to tell (`MIN_TEXT_CHARS`). In a
cluster every replica folds every other replica's samples (`Router.remote_text`), so all
use the same ratio.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque

from kinference.requests.prompt import CHARS_PER_TOKEN

PRIOR_CHARS_PER_TOKEN = float(CHARS_PER_TOKEN)  # English prose, until a model is learned
MIN_SAMPLES = 3  # samples of a model before its median replaces the prior
WINDOW = 63  # samples kept per model (odd: the median is one of them)
MIN_TEXT_CHARS = 256  # shorter prompts are mostly template and rounding
MIN_RATIO, MAX_RATIO = 0.5, 16.0  # characters per token any tokenizer makes
MAX_MODELS = 1024  # models tracked (model names come from the policy; a bound all the same)


class TextSize:
    """Characters per token per model (the prior for a model not learned yet)."""

    def __init__(self, prior: float = PRIOR_CHARS_PER_TOKEN) -> None:
        self.prior = prior
        # Per model: its last WINDOW samples in arrival order, and the same sorted (kept
        # sorted as they come and go, so a report does not sort the window again).
        self._samples: dict[str, tuple[deque[float], list[float]]] = {}
        self._ratio: dict[str, float] = {}  # the median in force, per learned model

    def chars_per_token(self, model: str) -> float:
        """The ratio in force for `model` (cheap: a dict lookup, on every Pick)."""
        return self._ratio.get(model, self.prior)

    def observe(self, model: str, chars: float, tokens: float) -> bool:
        """One report: `chars` of text took `tokens` tokens. False if it taught nothing."""
        if chars < MIN_TEXT_CHARS or tokens < 1.0:
            return False
        ratio = chars / tokens
        if not MIN_RATIO <= ratio <= MAX_RATIO:
            return False
        kept = self._samples.get(model)
        if kept is None:
            if len(self._samples) >= MAX_MODELS:  # forget the model learned first
                oldest = next(iter(self._samples))
                del self._samples[oldest]
                self._ratio.pop(oldest, None)
            kept = self._samples[model] = (deque(maxlen=WINDOW), [])
        samples, ordered = kept
        if len(samples) == WINDOW:  # the oldest leaves the window
            del ordered[bisect_left(ordered, samples[0])]
        samples.append(ratio)
        insort(ordered, ratio)
        if len(samples) >= MIN_SAMPLES:
            self._ratio[model] = _median(ordered)
        return True

    def learned(self) -> dict[str, float]:
        """The learned ratios (models still at the prior are absent)."""
        return dict(self._ratio)


def _median(ordered: list[float]) -> float:
    """`statistics.median` of a sorted list: the middle sample, or the mean of the two."""
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2

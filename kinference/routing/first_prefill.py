"""A worker's prefill speed from its first tokens, before its final reports tell it.

The TTFT model's prefill rate per worker (`routing.rates`) is learned from
ReportFinalToken, which says what the engine had cached; a reply holds the engine for
seconds, so a pool's first final reports come seconds into its life, and until then every
worker is at the prior (10k tokens/s) or its peers' mean. Picks made then are blind to
speed: a shared prompt cached on an engine still prefilling a 12k-token document is sent
cold because the document's rest is priced at the prior's rate while the engine computes it
twice as fast (vllm-64, 12 req/s, h36), and in a pool of fast and slow engines the first
prompts of each group settle on slow engines as readily as on fast ones (mixed, h34).

A first token tells the speed at once. One counts here when the pick expected no
cached tokens on its worker (the whole prompt was prefilled, as far as the router can
tell), and found no queue ahead by the test a final report's sample passes
(`Learning.first_token`): its TTFT less the predicted wait and the learned busy cost of the
sequences beside it, against the prompt's estimated tokens. The estimate counts the text at
the characters per token in force (`routing.textsize`); the samples keep the text's
characters, and are counted again when the model's ratio is learned anew. The last
`MAX_SAMPLES` per worker go to `Rates.observe_first`, which keeps the slope at most the
prior's and lets a single short prompt set none; final reports replace them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from kinference.routing.rates import Rates
from kinference.routing.textsize import TextSize

MAX_SAMPLES = 8  # per worker: a provisional rate lives until the first final reports
MAX_WORKERS = 4096  # (model, slot) pairs tracked; the first tracked is forgotten past it


@dataclass(frozen=True, slots=True)
class FirstSample:
    """One cold first token: the prompt's estimate as text and the rest, and its TTFT net
    of the predicted wait and busy cost (ms)."""

    text_chars: float  # 0: the prompt's text not countable (the estimate is `other_tokens`)
    other_tokens: float  # the estimate's fixed part (overheads, media), or all of it
    net_ms: float

    def tokens(self, chars_per_token: float) -> float:
        return self.other_tokens + self.text_chars / chars_per_token


class FirstPrefill:
    """The first tokens' samples per worker, while its final reports set no slope."""

    def __init__(self, rates: Rates, text: TextSize) -> None:
        self.rates = rates
        self.text = text
        self._samples: dict[tuple[str, int], deque[FirstSample]] = {}

    def observe(self, slot: int, model: str, sample: FirstSample) -> bool:
        """A cold first token on the worker; False when it changed no rate."""
        key = (model, slot)
        samples = self._samples.get(key)
        if samples is None:
            if len(self._samples) >= MAX_WORKERS:
                del self._samples[next(iter(self._samples))]
            samples = self._samples[key] = deque(maxlen=MAX_SAMPLES)
        samples.append(sample)
        return self._fit(key, samples)

    def recount(self, model: str) -> None:
        """The model's characters per token changed: its samples' tokens with it."""
        for key, samples in list(self._samples.items()):
            if key[0] == model:
                self._fit(key, samples)

    def forget(self, slot: int) -> None:
        for key in [key for key in self._samples if key[1] == slot]:
            del self._samples[key]

    def _fit(self, key: tuple[str, int], samples: deque[FirstSample]) -> bool:
        model, slot = key
        ratio = self.text.chars_per_token(model)
        points = [(sample.tokens(ratio), sample.net_ms) for sample in samples]
        if self.rates.observe_first(slot, model, points):
            return True
        if self.rates.final_slope(slot, model):  # the final reports' fit is in force
            del self._samples[key]
        return False

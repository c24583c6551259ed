"""Whether other prompts' pending prefill delays a new prompt: learned per model.

The TTFT model counts the prefill pending on a worker (picked there, no first token yet,
not shared by the new prompt) as a wait (`routing.pending`): vLLM's scheduler (v1, chunked
prefill) gives a prompt being prefilled the step's token budget first, so a new prompt
starts when it is done. Other engines overlap prefills (each request prefilled apart, or
several partial prefills at once): there the new prompt waits for none of it. Which one a
pool's engines do is learned from the order of first tokens, as the share of the pending
prefill a new prompt waits for (prior 1, the vLLM form):

- *overtaken*: a request's first token came while a request picked before it to the same
  worker was still prefilling, and that one's first token came `OVERTAKE_MARGIN_MS` or
  more later (not the same engine step): the later prompt did not wait; a sample of 0,
  taken at the overtaken one's first token (an error or a release takes none);
- *waited*: a request whose pick predicted it a pending-prefill wait of at least
  `MIN_WAIT_MS` and at least its own unqueued TTFT (so that on an overlapping engine it
  would have come first) got its first token after every request picked there before it:
  a sample of 1. A queue for a batch slot or a missed cache only delays a request, so they
  can only make such a sample of 1 (the prior's side), never a false 0.

The share is the samples' mean shrunk toward the prior by `PRIOR_SAMPLES` (exponential
forgetting, `alpha`): one overtake brings it to a fifth. The prior is light on purpose: at
a share of 1 the model sends new prompts away from pending prefill, so samples are rare
(0-4 in 10 s at 6-18 req/s on 8 engines, h55); at a lower share requests go behind
pending prefill, and each then is a sample either way, so a wrong low share is corrected
by the next requests, where a wrong share of 1 would never be.
"""

from __future__ import annotations

import math

OVERTAKE_MARGIN_MS = 20.0
MIN_WAIT_MS = 30.0
PRIOR_SAMPLES = 0.25  # the prior's weight, in samples
MAX_MODELS = 1024  # models with samples (names come from the policy; a bound anyway)


class PrefillOverlap:
    """The learned share per model, and the overtakes awaiting their overtaken first token."""

    def __init__(self, alpha: float = 0.1) -> None:
        self.alpha = alpha
        self._sums: dict[str, tuple[float, float]] = {}  # model -> (weight, weighted sum)
        self._overtaken: dict[object, float] = {}  # pick key -> when it was first overtaken

    def share(self, model: str) -> float:
        """Of the pending prefill ahead of a new prompt on the model's engines, the share it
        waits for (1 until samples say otherwise)."""
        sums = self._sums.get(model)
        if sums is None:
            return 1.0
        weight, total = sums
        return (PRIOR_SAMPLES + total) / (PRIOR_SAMPLES + weight)

    def learned(self, model: str) -> float:
        """The learned share (NaN: no sample yet, the prior in use)."""
        return math.nan if model not in self._sums else self.share(model)

    def observe(self, model: str, waited: float) -> bool:
        """One sample (0: the prompt did not wait for the pending prefill, 1: it did).
        False when it says nothing (not a number)."""
        if not math.isfinite(waited):
            return False
        sample = min(max(waited, 0.0), 1.0)
        weight, total = self._sums.get(model, (0.0, 0.0))
        if model not in self._sums and len(self._sums) >= MAX_MODELS:
            del self._sums[next(iter(self._sums))]
        keep = 1.0 - self.alpha
        self._sums[model] = (weight * keep + 1.0, total * keep + sample)
        return True

    def overtaken(self, keys: list[object], now_ms: float) -> None:
        """`keys`' picks were still prefilling at a later pick's first token (now)."""
        for key in keys:
            self._overtaken.setdefault(key, now_ms)

    def ended(self, key: object, now_ms: float, *, first_token: bool) -> bool:
        """The pick `key` ended its prefill now (with its first token, or not): True when
        it had been overtaken by at least the margin (a sample of 0 is then due)."""
        at = self._overtaken.pop(key, None)
        return first_token and at is not None and now_ms - at >= OVERTAKE_MARGIN_MS

    def pending_overtakes(self) -> int:
        """Picks marked overtaken whose prefill has not ended (bounded by those in flight)."""
        return len(self._overtaken)

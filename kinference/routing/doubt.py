"""How much of the unknown batch's doubt comes true, learned per model from first tokens.

While a worker's batch is not known, the TTFT model prices a request past the most its
pool was seen running at an expected wait (`readings.unseen_wait`): the batch may be any
size from what was seen to the guess. Every pick that goes past that frontier anyway tests
the bet, and its first token answers it: on time (no queue: the doubt's wait did not come
true) or late (it queued: the wait came true, often longer than its expectation). This
module keeps, per model (a pool's engines are alike: each test teaches all of them), the
share of the priced doubt that came true: an exponentially weighted mean of `realized /
priced` over the tests (each weighing DOUBT_LEARNING_RATE), each sample within
0..MAX_DOUBT_SHARE, the mean starting at the prior 1 (the expected wait as priced: today's
model). The TTFT scorer multiplies the doubt
by it: an engine whose frontier tests never queue (vLLM's 64-256 sequences at a load that
runs a handful) sheds the doubt as its tests come back on time; one that queued past its
frontier keeps it or prices it higher (until its batch is known and the doubt goes anyway).
"""

from __future__ import annotations

import math

# A test's realized wait counts up to this many times the priced doubt (a queue behind a
# 4-slot batch waits ~10 times the expectation priced at its frontier; more is the
# engine's hiccup, and one report should not outweigh the rest for long).
MAX_DOUBT_SHARE = 4.0
# Priced doubts under this (ms) are no test: their outcome is noise around nothing.
MIN_PRICED_MS = 1.0
MAX_DOUBT_MODELS = 1024  # models with a learned share (names come from the policy)
# Weight of a new test. Tests are few (4-35 in 10 s at 12-18 req/s on vllm-64) and each
# answers the bet outright; at the rates' 0.1 the share was still 0.5-1.0 when most of the
# doubt's cold sends happened (branch h64's trace). At 0.25, 8 on-time tests leave 0.1 of
# it; one queue at the cap puts back 1.0.
DOUBT_LEARNING_RATE = 0.25


class DoubtShares:
    """The learned share of the unknown batch's doubt, per model (prior 1)."""

    def __init__(self, alpha: float = DOUBT_LEARNING_RATE) -> None:
        self.alpha = alpha  # weight of a new test
        self._shares: dict[str, float] = {}

    def share(self, model: str) -> float:
        """The share of the priced doubt expected to come true on `model`'s engines."""
        return self._shares.get(model, 1.0)

    def learned(self, model: str) -> float:
        """The learned share of `model` (NaN: none learned, the prior 1 in use)."""
        return self._shares.get(model, math.nan)

    def observe(self, model: str, priced_ms: float, realized_ms: float) -> bool:
        """One test: a pick priced at `priced_ms` of doubt waited `realized_ms` (0: its
        first token came on time). False when it teaches nothing (too small a doubt, not
        a number)."""
        if not (priced_ms >= MIN_PRICED_MS and math.isfinite(priced_ms)):
            return False
        if not math.isfinite(realized_ms):
            return False
        ratio = min(max(realized_ms / priced_ms, 0.0), MAX_DOUBT_SHARE)
        old = self._shares.get(model)
        if old is None and len(self._shares) >= MAX_DOUBT_MODELS:  # forget the first learned
            del self._shares[next(iter(self._shares))]
        old = 1.0 if old is None else old
        self._shares[model] = (1.0 - self.alpha) * old + self.alpha * ratio
        return True

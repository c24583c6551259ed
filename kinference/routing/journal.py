"""What the routing core tells the rest of the cluster: a journal of load and latency events.

The routing core calls these hooks as it changes its own state; standalone they go nowhere,
in a cluster `kinference.cluster` batches them to Redis in the background. Each call must be
cheap and must never block: it runs on the Pick path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Journal(Protocol):
    def picked(self, endpoint: str, model: str, hashes: Sequence[int]) -> None:
        """A request went to `endpoint`; `hashes` are its prompt's prefix blocks."""

    def released(self, endpoint: str) -> None:
        """A request on `endpoint` finished, was aborted or expired."""

    def first_token(self, endpoint: str, model: str, ttft_ms: float) -> None:
        """A worker answered its first byte after `ttft_ms` milliseconds."""

    def itl(self, endpoint: str, model: str, bucket_counts: Sequence[int]) -> None:
        """A finished response's inter-token gaps, as layout-1 bucket counts."""

    def served(
        self, endpoint: str, model: str, uncached: float, prefill_ms: float, service_ms: float
    ) -> None:
        """A finished request's samples for the TTFT model: uncached prompt tokens, its
        prefill milliseconds (TTFT less the predicted wait) and how long it held its batch
        slot after the first token; NaN where not measured."""

    def prefilling(
        self, endpoint: str, pick: int, start: int, tokens: float, block_tokens: float
    ) -> None:
        """The pick just journalled (`picked`, same endpoint) prefills `tokens` uncached
        tokens there, its blocks from `start` on (`block_tokens` each) until `prefilled`;
        `pick` names it among this replica's picks."""

    def prefilled(self, endpoint: str, pick: int) -> None:
        """That pick's prefill is over (first token, upstream error or release)."""

    def shortfall(self, endpoint: str, hashes: Sequence[int], kept: int, age: int | None) -> None:
        """`endpoint` had only `kept` leading blocks of `hashes` cached although the index
        said more, the deepest predicted one `age` blocks old (`PrefixIndex.shortfall`)."""

    def confirmed(self, endpoint: str, age: int | None) -> None:
        """`endpoint` had the predicted blocks cached, the deepest `age` blocks old."""

    def text(self, endpoint: str, model: str, chars: float, tokens: float) -> None:
        """A sample of `model`'s characters per token: `chars` of prompt text were
        `tokens` tokens (`routing.textsize`)."""

    def busy(self, endpoint: str, model: str, sequences: float, excess_ms: float) -> None:
        """A sample of `model`'s busy cost (`routing.rates`): a request served on
        `endpoint` beside `sequences` running ones took `excess_ms` beyond its predicted
        queue and prefill."""


class NullJournal:
    """Standalone: the instance's own state is the whole state."""

    def picked(self, endpoint: str, model: str, hashes: Sequence[int]) -> None:
        pass

    def released(self, endpoint: str) -> None:
        pass

    def first_token(self, endpoint: str, model: str, ttft_ms: float) -> None:
        pass

    def itl(self, endpoint: str, model: str, bucket_counts: Sequence[int]) -> None:
        pass

    def served(
        self, endpoint: str, model: str, uncached: float, prefill_ms: float, service_ms: float
    ) -> None:
        pass

    def prefilling(
        self, endpoint: str, pick: int, start: int, tokens: float, block_tokens: float
    ) -> None:
        pass

    def prefilled(self, endpoint: str, pick: int) -> None:
        pass

    def shortfall(self, endpoint: str, hashes: Sequence[int], kept: int, age: int | None) -> None:
        pass

    def confirmed(self, endpoint: str, age: int | None) -> None:
        pass

    def text(self, endpoint: str, model: str, chars: float, tokens: float) -> None:
        pass

    def busy(self, endpoint: str, model: str, sequences: float, excess_ms: float) -> None:
        pass

"""Precise prefix matches as a `CachedTokenSource` (`routing/plugins/cached.py`): predicted
cached prompt tokens per candidate.

Trusted workers get their precise count (blocks the engine's events say it holds, times the
block size, never the prompt's last token); the others get what the approximate source
says. A prompt whose tokenization a Pick stopped at its bound (`PromptBlocks.bounded`:
time or characters, not a block nobody holds) gives a trusted worker holding all of its
named blocks the approximate source's figure where that is higher (the precise count
there is only a floor). The Pick's `PreciseQuery` travels in `PrefixQuery.precise` (from
`RouteQuery.precise`).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from kinference.kvcache.memory import Room
from kinference.kvcache.precise import PreciseCaches, PreciseQuery

FloatArray = np.ndarray  # the seam's FloatArray (float64), one value per slot


class _Query(Protocol):
    @property
    def pool(self) -> str: ...

    @property
    def precise(self) -> PreciseQuery | None: ...

    @property
    def output_tokens(self) -> int: ...


class _Source(Protocol):
    # `query` is the seam's PrefixQuery (read structurally here: kvcache knows no routing).
    def cached_tokens(self, query: Any, slots: Any) -> FloatArray: ...


class PreciseCachedTokens:
    """Registered for mode `precise`: the engines' own blocks where the worker is trusted,
    the approximate source's figure elsewhere."""

    def __init__(self, caches: PreciseCaches, approximate: _Source) -> None:
        self.caches = caches
        self.approximate = approximate

    def cached_tokens(self, query: _Query, slots: np.ndarray) -> FloatArray:
        return self.match(query, slots)[0]

    def match(
        self, query: _Query, slots: np.ndarray
    ) -> tuple[FloatArray, str | None, tuple[Room, ...]]:
        """Cached tokens per slot; why the Pick is DEGRADED (a candidate's events are not
        trustworthy now, or the prompt could not be tokenized), if it is; and per slot
        whether the request fits in the worker's cache (empty: not known anywhere)."""
        fallback = self.approximate.cached_tokens(query, slots)
        precise = query.precise
        if precise is None:
            return fallback, None, ()
        prompt = precise.blocks.get(query.pool)
        if prompt is None or not prompt.blocks:
            return fallback, precise.problem, ()
        match = self.caches.match(query.pool, prompt, slots.tolist(), query.output_tokens)
        if match is None:
            return fallback, precise.problem, ()
        usable = (prompt.tokens - 1) // prompt.block_size
        tokens = np.minimum(match.blocks, usable) * prompt.block_size
        if prompt.bounded:  # a worker holding all that was named may hold more: a floor
            open_end = match.blocks >= len(prompt.blocks)
            beyond = np.minimum(fallback, usable * prompt.block_size)
            tokens = np.where(open_end, np.maximum(tokens, beyond), tokens)
        result: FloatArray = np.where(match.trusted, tokens, fallback)
        return result, match.degraded() or precise.problem, match.rooms

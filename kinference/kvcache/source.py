"""Precise prefix matches in the shape of issue 13's `CachedTokenSource` seam
(`routing/plugins/cached.py` on branch i13): predicted cached prompt tokens per candidate.

Trusted workers get their precise count (blocks the engine's events say it holds, times the
block size, never the prompt's last token); the others get what the approximate source
says. The seam's `PrefixQuery` needs one more field for it, `precise` (the Pick's
`PreciseQuery`, carried from `RouteQuery.precise`); until then this adapter reads it
structurally and answers the approximate source's figures when it is absent.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from kinference.kvcache.precise import PreciseCaches, PreciseQuery

FloatArray = np.ndarray  # the seam's FloatArray (float64), one value per slot


class _Query(Protocol):
    @property
    def pool(self) -> str: ...

    @property
    def precise(self) -> PreciseQuery | None: ...


class _Source(Protocol):
    def cached_tokens(self, query: _Query, slots: np.ndarray) -> FloatArray: ...


class PreciseCachedTokens:
    """Registered for mode `precise` (`CachedTokenSources.register("precise", ...)`)."""

    def __init__(self, caches: PreciseCaches, approximate: _Source) -> None:
        self.caches = caches
        self.approximate = approximate

    def cached_tokens(self, query: _Query, slots: np.ndarray) -> FloatArray:
        fallback = self.approximate.cached_tokens(query, slots)
        precise = query.precise
        prompt = precise.blocks.get(query.pool) if precise is not None else None
        if prompt is None or not prompt.blocks:
            return fallback
        match = self.caches.match(query.pool, prompt, slots.tolist())
        if match is None:
            return fallback
        usable = (prompt.tokens - 1) // prompt.block_size
        tokens = np.minimum(match.blocks, usable) * prompt.block_size
        result: FloatArray = np.where(match.trusted, tokens, fallback)
        return result

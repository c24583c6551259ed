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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from kinference.kvcache.blocks import PromptBlocks
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
        cached, note, rooms, _ = self.match_lazily(query, slots, lazy=False)
        return cached, note, rooms

    def match_lazily(
        self, query: _Query, slots: np.ndarray, *, lazy: bool = True
    ) -> tuple[FloatArray, str | None, tuple[Room, ...], Unsettled | None]:
        """`match`, but where a worker's queue would have to be replayed, its cached tokens
        as its index match gives them, an upper bound: `Unsettled` makes them exact (None:
        every candidate's is)."""
        fallback = self.approximate.cached_tokens(query, slots)
        precise = query.precise
        if precise is None:
            return fallback, None, (), None
        prompt = precise.blocks.get(query.pool)
        if prompt is None or not prompt.blocks:
            return fallback, precise.problem, (), None
        listed = slots.tolist()
        match = self.caches.match(query.pool, prompt, listed, query.output_tokens, lazy=lazy)
        if match is None:
            return fallback, precise.problem, (), None
        tokens = _tokens(match.blocks, prompt, fallback)
        result: FloatArray = np.where(match.trusted, tokens, fallback)
        note = match.degraded() or precise.problem
        if not match.unsettled:
            return result, note, match.rooms, None

        def exact(position: int) -> float:
            depth = int(match.blocks[position])
            found = self.caches.settle(query.pool, prompt, listed[position], depth)
            value = _tokens(np.array([float(found)]), prompt, fallback[position : position + 1])
            return float(value[0])

        return result, note, match.rooms, Unsettled(list(match.unsettled), exact)


def _tokens(blocks: FloatArray, prompt: PromptBlocks, fallback: FloatArray) -> FloatArray:
    """Cached tokens of trusted candidates holding `blocks` of the prompt's leading blocks
    (never its last token); `fallback`: the approximate source's figure for them."""
    usable = (prompt.tokens - 1) // prompt.block_size
    tokens: FloatArray = np.minimum(blocks, usable) * prompt.block_size
    if prompt.bounded:  # a worker holding all that was named may hold more: a floor
        open_end = blocks >= len(prompt.blocks)
        beyond = np.minimum(fallback, usable * prompt.block_size)
        tokens = np.where(open_end, np.maximum(tokens, beyond), tokens)
    return tokens


@dataclass(slots=True)
class Unsettled:
    """The candidates (positions) of a lazy match whose cached tokens are still an upper
    bound (their worker's index match), and how to make one exact: the same or fewer
    tokens, never more (a match only shrinks by the requests ahead's evictions; the
    tokens grow with the blocks)."""

    positions: list[int]
    exact: Callable[[int], float] | None = None

    def settle(self, cached: FloatArray, position: int) -> None:
        """Candidate `position`'s exact cached tokens into `cached` (in place)."""
        self.positions.remove(position)
        if self.exact is not None:
            cached[position] = self.exact(position)

    def complete(self, cached: FloatArray) -> None:
        """Every candidate's exact cached tokens into `cached` (in place)."""
        for position in list(self.positions):
            self.settle(cached, position)

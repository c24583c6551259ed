"""The prefix-match seam: how many of a prompt's tokens each candidate probably has cached.

The prefix and TTFT scorers never look at an index themselves; the router asks the pool's
`CachedTokenSource` once per Pick and hands the answer to every plugin in
`PickContext.cached_tokens`. The default source is the approximate index
(`ApproximateCachedTokens`: our own block hashes of the prompt bytes, learned from picks and
corrected by reported `cached_tokens`); a precise source (engine KV events) plugs in by
implementing `cached_tokens` and being registered for a pool's prefix mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np

from kinference.kvcache.precise import PreciseQuery
from kinference.records import record
from kinference.requests import InferenceRequest
from kinference.requests.prompt import CHARS_PER_TOKEN
from kinference.routing.prefix import PrefixIndex
from kinference.routing.table import FloatArray, IndexArray

APPROXIMATE = "approximate"  # the prefix mode of a pool that names none
PRECISE = "precise"  # the prefix mode fed by the engines' own KV events


@record  # built every Pick (a frozen dataclass sets its 9 fields through object.__setattr__)
class PrefixQuery:
    """One Pick's prompt, as a cached-tokens source may read it."""

    request: InferenceRequest  # the parsed request: prompt segments, token estimate
    model: str  # as the pool's engines know it (hashes are seeded by it)
    pool: str  # namespace/name of the pool the candidates belong to
    hashes: tuple[int, ...]  # approximate block hashes of the prompt's leading bytes
    block_bytes: int  # prompt bytes per approximate block
    prompt_tokens: float  # the request's estimated prompt tokens
    truncated: bool = False  # the prompt is longer than the hashed blocks (max_blocks)
    precise: PreciseQuery | None = None  # the prompt in precise pools' engine blocks
    chars_per_token: float = CHARS_PER_TOKEN  # the model's, learned (`routing.textsize`)

    @property
    def output_tokens(self) -> int:
        """The request's output tokens at most (0: not given)."""
        return self.request.max_output_tokens or 0


class CachedTokenSource(Protocol):
    """Predicted cached prompt tokens per candidate slot."""

    def cached_tokens(self, query: PrefixQuery, slots: IndexArray) -> FloatArray:
        """One value per entry of `slots` (same order): prompt tokens predicted cached on
        that worker, between 0 and `query.prompt_tokens`. Must not block: it runs on Pick."""
        ...


class ApproximateCachedTokens:
    """Our own prefix index: the share of leading blocks a worker holds, in prompt tokens."""

    def __init__(self, index: PrefixIndex) -> None:
        self.index = index

    def cached_tokens(self, query: PrefixQuery, slots: IndexArray) -> FloatArray:
        cached = np.zeros(len(slots))
        total = len(query.hashes)
        if not total:
            return cached
        matched = self.index.match(query.hashes)
        if not matched:
            return cached
        per_block = _tokens_per_block(query, total)
        beyond = _beyond_hashed(query)
        for i, slot in enumerate(slots.tolist()):
            blocks = matched.get(slot, 0)
            if blocks:
                known = blocks * per_block
                # Every hashed block matched a prompt longer than what is hashed: the rest
                # is taken as the same up to its last segment (the new turn).
                cached[i] = min(max(known, beyond) if blocks == total else known,
                                query.prompt_tokens)  # fmt: skip
        return cached


def _beyond_hashed(query: PrefixQuery) -> float:
    """Tokens predicted cached for a truncated prompt whose hashed blocks all matched: all
    but its last segment's estimate; 0 when the prompt was hashed whole."""
    segments = query.request.prompt.segments
    if not query.truncated or not segments:
        return 0.0
    return max(query.prompt_tokens - len(segments[-1]) / query.chars_per_token, 0.0)


def _tokens_per_block(query: PrefixQuery, total: int) -> float:
    """Prompt tokens one hashed block stands for: the whole prompt spread over its blocks,
    or, past `max_blocks`, a block's bytes at the model's bytes per token (only the hashed
    part of a long prompt is known to be cached)."""
    if query.truncated:
        return query.block_bytes / query.chars_per_token
    return query.prompt_tokens / total


class CachedTokenSources:
    """The source per prefix mode (`approximate` always; others registered by name)."""

    def __init__(
        self, default: CachedTokenSource, extra: Mapping[str, CachedTokenSource] | None = None
    ) -> None:
        self._sources: dict[str, CachedTokenSource] = {APPROXIMATE: default, **(extra or {})}

    def register(self, mode: str, source: CachedTokenSource) -> None:
        """Add a source for pools whose prefix mode is `mode` (composition root only)."""
        self._sources[mode] = source

    def get(self, mode: str) -> CachedTokenSource:
        """The source for a mode; an unknown mode falls back to the approximate index."""
        return self._sources.get(mode) or self._sources[APPROXIMATE]

"""A worker's KV-cache size in the approximate prefix index's units, and which estimate of
it bounds the worker's entry there (`PrefixIndex.capacity`).

Engines publish their cache's size in tokens (`kinference.workers.capacity`); the index
counts blocks of `block_bytes` bytes of prompt text. Tokens become blocks through the
characters per token learned of the endpoint's models (`TextSize`; the prior, 4, until
learned; the most of its models' ratios where it serves several: the larger estimate, which
a shortfall can still lower): `blocks = tokens x chars_per_token / block_bytes`. Text whose
UTF-8 is longer than its characters makes more blocks a token than this counts, as every
other conversion of the index (`Learning._tokens_per_block`) assumes too.

The engine's cache also holds what its requests generate and what runs right now, so the
prompts it keeps are fewer than its size: the size is an upper bound, which the index's own
learning (`PrefixIndex.shortfall`) lowers where the worker keeps less.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable

MAX_CAPACITY_BLOCKS = 1 << 40  # more than any index keeps (`lru_blocks_per_worker` bounds it)


class CapacitySource(enum.StrEnum):
    """Which estimate bounds a worker's prefix-index entry (the metric's `source` label)."""

    BOUND = "bound"  # `prefix.lru_blocks_per_worker`: nothing smaller is known
    ENGINE = "engine"  # the KV-cache size its engine publishes
    LEARNED = "learned"  # what it was seen to keep (reported cached tokens), below that


def blocks_of_tokens(
    tokens: float, chars_per_token: Iterable[float], block_bytes: int
) -> int | None:
    """Index blocks a cache of `tokens` holds (see the module docstring); None when
    `tokens` is no size (not finite, not above zero: a reading that says nothing)."""
    if not (math.isfinite(tokens) and tokens > 0.0):
        return None
    ratio = max(chars_per_token)
    blocks = tokens * ratio / max(block_bytes, 1)
    return max(math.floor(min(blocks, MAX_CAPACITY_BLOCKS)), 1)

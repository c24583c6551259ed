"""How many tokens an engine's KV cache holds, from its metrics page (`EngineMetrics.
kv_capacity`; the series per engine kind and their sources are in `engines`).

An engine states its size once at start-up (vLLM's info gauge, SGLang's and TRT-LLM's
gauges), so nothing here changes between scrapes but a restart's new configuration. What
the page says is not trusted: every part must be a finite number above zero (a label
"None", as vLLM writes before profiling, "abc", 0, -5, NaN or Inf say nothing), a block
holds at most `MAX_BLOCK_TOKENS` tokens, and the product is bounded to `MAX_KV_TOKENS`
(1e30 blocks are read as that bound: more than any engine holds, never an overflow).

Where a page carries several samples (data-parallel ranks, each with its own cache), the
largest is read: one engine's cache, the one a request lands in; ranks are not summed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from kinference.workers.engines import InfoLabel, KvCapacity, Series
from kinference.workers.parse import iter_samples, newest_sample

MAX_BLOCK_TOKENS = 1 << 20  # tokens of one KV block: engines use 1-1024
MAX_KV_TOKENS = 1 << 36  # tokens of one engine's KV cache (~6.9e10; GPUs hold ~1e7)


def read_kv_capacity(text: str, alternatives: Iterable[KvCapacity]) -> int | None:
    """Tokens the engine's KV cache holds: the first alternative whose parts are all
    read and valid, bounded to `MAX_KV_TOKENS`; None when none is."""
    for capacity in alternatives:
        blocks = _number(text, capacity.blocks)
        if blocks is None:
            continue
        if capacity.per_block is None:
            return _bounded(blocks)
        per_block = _number(text, capacity.per_block)
        if per_block is not None and per_block <= MAX_BLOCK_TOKENS:
            return _bounded(blocks * per_block)
    return None


def _bounded(tokens: float) -> int | None:
    """Whole tokens, at most `MAX_KV_TOKENS`; None below one (a fraction of a token)."""
    whole = math.floor(min(tokens, MAX_KV_TOKENS))
    return whole if whole >= 1 else None


def _number(text: str, part: Series | InfoLabel) -> float | None:
    """The part's value when finite and above zero (the largest of a gauge's samples)."""
    if isinstance(part, InfoLabel):
        sample = newest_sample(text, part.name)
        values = [] if sample is None else [_label_number(sample.labels.get(part.label))]
    else:
        values = [s.value for s in iter_samples(text, part.name) if part.matches(s.labels)]
    valid = [value for value in values if value is not None and _positive(value)]
    return max(valid) if valid else None


def _label_number(label: str | None) -> float | None:
    if label is None or "_" in label:  # float() takes "1_000"; no engine writes it
        return None
    try:
        return float(label)
    except ValueError:
        return None


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0.0

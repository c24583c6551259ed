"""A deterministic replay of the eviction learning (h103): one Router over 4 workers, each
an LRU prefix cache of `CAP` documents' blocks (the router's own block hashes, touched
deepest first as engines free them); questions on `DOCS` documents in a seeded random
order, one at a time, each reporting the cached tokens its engine really had. Prints, per
case and seed, the token hit ratio and the prediction error (mean absolute error of the
predicted against the reported cached tokens). No clock, no engines, no network:

    python -m loadtest.eviction_replay
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Sequence

from kinference.routing.learning import Served
from tests.routing.plugin_helpers import pool_router, system_query

ENDPOINTS = [f"10.0.0.{i}:8000" for i in range(1, 5)]
DOCUMENT = "The tides follow the moon, and the harbour follows the tides. " * 200
CASES = ((12, 2.5), (16, 2.5), (24, 3.5))  # documents, each engine's cache in documents


class LruCache:
    """An engine's prefix cache: `capacity` blocks, least recently used evicted first; a
    prompt's blocks are touched deepest first, as engines free them (the leading ones stay
    longest)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.blocks: OrderedDict[int, None] = OrderedDict()

    def serve(self, hashes: Sequence[int]) -> int:
        """Prefill a prompt of `hashes`: how many leading blocks were cached."""
        held = 0
        while held < len(hashes) and hashes[held] in self.blocks:
            held += 1
        for block in reversed(hashes):
            self.blocks[block] = None
            self.blocks.move_to_end(block)
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)
        return held


def replay(seed: int, documents: int, cache_documents: float, requests: int = 300) -> str:
    router = pool_router(ENDPOINTS, 50.0)
    rng = random.Random(seed)
    texts = [f"Document {d}. " + DOCUMENT for d in range(documents)]
    caches: dict[str, LruCache] = {}
    hit = total = 0
    for n in range(requests):
        local = router.route(system_query(rng.choice(texts), n)).local
        assert local is not None
        router.picked(local)
        size = int(len(local.hashes) * cache_documents)
        cache = caches.setdefault(local.endpoint, LruCache(size))
        prompt = int(local.prompt_tokens)
        cached = prompt * cache.serve(local.hashes) // len(local.hashes)
        hit, total = hit + cached, total + prompt
        ttft_ms = 10.0 + 0.05 * (prompt - cached)
        router.first_token(local, ttft_ms)
        router.final(local, Served(prompt, cached, (), ttft_ms, 500.0))
    error = router.learning.quality.cached_tokens.summary().mean_abs_error
    return f"hit {hit / total:.3f} mae {error:.0f}"


def main() -> None:
    for documents, cache_documents in CASES:
        for seed in range(5):
            print(documents, cache_documents, seed, replay(seed, documents, cache_documents))


if __name__ == "__main__":
    main()

"""Cost model of a simulated inference engine: a KV prefix cache and prefill/decode times.

The prefix cache works like vLLM's automatic prefix caching: the prompt is cut into blocks of
`block_chars` characters, each block is named by a hash chained over every block before it
(equal names mean equal prefixes), and the engine keeps at most `capacity_blocks` of them,
least recently used out first. A prompt's cached part is its longest run of leading blocks
the cache holds; the rest is prefilled and its blocks inserted. The hashing is the engine's
own (blake2b), independent of the picker's, so the simulation measures real cache behaviour
rather than the picker's model of it.

Tokens are characters / `chars_per_token` (4 for English prose, the picker's estimate too).
Times are in seconds of simulated engine time; a simulation scales them down to keep runs
short. Everything is deterministic for a given seed: no clocks, no global random state.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import OrderedDict
from dataclasses import dataclass

from kinference.itl_layout import EDGES_MS as ITL_EDGES_MS

_DIGEST_BYTES = 16


@dataclass(frozen=True, slots=True)
class Admission:
    """What one prompt found in the cache, in tokens."""

    cached_tokens: int
    prompt_tokens: int

    @property
    def uncached_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


@dataclass(frozen=True, slots=True)
class Timing:
    """Engine speed; the defaults are of the order of an 8B model on one data-centre GPU."""

    prefill_base_s: float = 0.008  # scheduling and kernel launches of one prefill step
    prefill_s_per_token: float = 5e-5  # ~20k prompt tokens/s
    decode_gap_s: float = 0.012  # inter-token gap of a lone sequence
    decode_gap_s_per_seq: float = 4e-4  # added to the gap by each other running sequence
    jitter: float = 0.1  # +- fraction drawn per call, from the engine's seeded generator


class EngineModel:
    """One engine's prefix cache and cost model. Not thread-safe; one event loop uses it."""

    def __init__(
        self,
        capacity_blocks: int,
        block_chars: int = 64,
        seed: int = 0,
        *,
        chars_per_token: int = 4,
        timing: Timing | None = None,
    ) -> None:
        if capacity_blocks < 1 or block_chars < 1 or chars_per_token < 1:
            raise ValueError("capacity_blocks, block_chars and chars_per_token must be >= 1")
        self.capacity_blocks = capacity_blocks
        self.block_chars = block_chars
        self.chars_per_token = chars_per_token
        self.timing = timing or Timing()
        self.running = 0  # sequences being prefilled or decoded: the decode batch
        self.admitted = 0  # prompts admitted so far
        self._rng = random.Random(seed)
        self._blocks: OrderedDict[bytes, None] = OrderedDict()  # oldest first

    def __len__(self) -> int:
        """Blocks held in the cache."""
        return len(self._blocks)

    def tokens(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token)

    def block_hashes(self, text: str, previous: bytes = b"") -> list[bytes]:
        """Chained hashes of the full blocks of `text` (a trailing partial block is not cached).

        `previous` is the hash of the block before `text` starts, to continue a chain.
        """
        hashes: list[bytes] = []
        size = self.block_chars
        for start in range(0, len(text) - size + 1, size):
            block = text[start : start + size].encode()
            previous = hashlib.blake2b(previous + block, digest_size=_DIGEST_BYTES).digest()
            hashes.append(previous)
        return hashes

    def cached_blocks(self, prompt: str) -> int:
        """Leading blocks of `prompt` in the cache, without touching it."""
        count = 0
        for name in self.block_hashes(prompt):
            if name not in self._blocks:
                break
            count += 1
        return count

    def admit(self, prompt: str, completion: str = "") -> Admission:
        """Serve `prompt`: count its cached prefix, then cache all its blocks.

        The blocks of `completion` (the generated text, whose KV the engine keeps too) are
        cached after the prompt's, so the next turn of a chat, which re-sends prompt and
        reply, finds both.
        """
        hashes = self.block_hashes(prompt + completion)
        hit = 0
        for name in hashes:
            if name not in self._blocks:
                break
            hit += 1
        for name in hashes:
            self._blocks[name] = None
            self._blocks.move_to_end(name)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)
        self.admitted += 1
        prompt_tokens = self.tokens(prompt)
        prompt_blocks = len(prompt) // self.block_chars
        cached_chars = min(hit, prompt_blocks) * self.block_chars
        return Admission(min(cached_chars // self.chars_per_token, prompt_tokens), prompt_tokens)

    def prefill_s(self, uncached_tokens: int) -> float:
        """Seconds to first token: a fixed step plus the tokens not found in the cache."""
        timing = self.timing
        return self._jitter(timing.prefill_base_s + uncached_tokens * timing.prefill_s_per_token)

    def decode_gap_s(self, batch: int | None = None) -> float:
        """Seconds between two output tokens with `batch` sequences running (default: now)."""
        others = max((self.running if batch is None else batch) - 1, 0)
        return self.timing.decode_gap_s + others * self.timing.decode_gap_s_per_seq

    def decode_s(self, completion_tokens: int, batch: int | None = None) -> float:
        """Seconds from first to last token of a completion."""
        return self._jitter(max(completion_tokens - 1, 0) * self.decode_gap_s(batch))

    def jitter_factor(self) -> float:
        """A factor of 1 +- `timing.jitter`, drawn from the engine's seeded generator."""
        spread = self.timing.jitter
        return 1.0 + self._rng.uniform(-spread, spread) if spread else 1.0

    def _jitter(self, seconds: float) -> float:
        return seconds * self.jitter_factor()


def itl_buckets(gap_s: float, completion_tokens: int) -> list[int]:
    """Layout-1 ITL bucket counts for `completion_tokens` tokens all `gap_s` apart."""
    gaps = max(completion_tokens - 1, 0)
    if gaps == 0:
        return []
    counts = [0] * (len(ITL_EDGES_MS) + 1)
    gap_ms = gap_s * 1000.0
    index = next((i for i, edge in enumerate(ITL_EDGES_MS) if gap_ms <= edge), len(ITL_EDGES_MS))
    counts[index] = gaps
    return counts

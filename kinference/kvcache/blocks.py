"""Block identities from token ids, independent of any engine's hash seed.

An engine names a KV block by a hash of its parent's hash and its tokens, seeded per process
(vLLM's `NONE_HASH` is random unless `PYTHONHASHSEED` is set), so two engines name the same
prefix differently and a router cannot compute their hashes. The events carry the token ids,
so we name blocks ourselves, the same way on both sides: block i's identity is
`id_i = id_{i-1} * B + content(tokens of block i)` mod 2^64, with `id_-1 = seed(adapter)`.
`content` mixes each token with a per-position odd constant through a 64-bit finaliser and
sums the results, so equal identities mean equal token prefixes (up to 2^-64 chance).
The same function turns a prompt's tokens into identities (all blocks at once, numpy) and an
event's stored blocks into identities (chained from the parent's known identity).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kinference.native import load_chain
from kinference.routing.blocks import mix64

BlockId = int
_MASK = (1 << 64) - 1
_BASE = 0x9E3779B97F4A7C15  # odd: the chain is invertible
_BASE_INVERSE = pow(_BASE, -1, 1 << 64)


@dataclass(frozen=True, slots=True)
class PromptBlocks:
    """A prompt cut into the engine's blocks, named by `kvcache.blocks` identities."""

    tokens: int  # prompt tokens, the trailing partial block included (estimated if not exact)
    block_size: int
    blocks: tuple[BlockId, ...]
    seconds: float = 0.0  # time spent rendering, tokenizing and naming
    # False: tokenized lazily, only as far as some worker could hold the prefix: `blocks`
    # end at the first block no worker holds (nothing after it can match) and `tokens` adds
    # an estimate of the rest; the rest's blocks follow under `ticket` once tokenized.
    exact: bool = True
    ticket: int = 0
    # Not exact because the walk reached its bound (`tokenize.prepare`: time, characters),
    # not a block no worker holds: a worker holding all of `blocks` may hold more of the
    # prompt, so its precise count is only a floor (`kvcache.source` takes the approximate
    # index's figure there when higher).
    bounded: bool = False


@functools.lru_cache(maxsize=64)
def _lanes(block_size: int) -> npt.NDArray[np.uint64]:
    """One odd 64-bit constant per position in a block (splitmix64 of the position)."""
    positions = np.arange(1, block_size + 1, dtype=np.uint64) * np.uint64(_BASE)
    return mix64(positions) | np.uint64(1)


@functools.lru_cache(maxsize=256)
def seed(adapter: str | None) -> int:
    """The identity before block 0: blocks computed with a LoRA adapter differ."""
    data = b"kinference-blocks\x00" + (adapter or "").encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def contents(tokens: npt.NDArray[np.uint32] | Sequence[int], block_size: int) -> list[int]:
    """The content hash of each full block of `tokens` (a trailing partial block is left out:
    engines cache whole blocks only)."""
    result: list[int] = _contents(tokens, block_size).tolist()
    return result


def _contents(
    tokens: npt.NDArray[np.uint32] | Sequence[int], block_size: int
) -> npt.NDArray[np.uint64]:
    array = np.asarray(tokens, dtype=np.uint64)
    count = len(array) // block_size
    grid = array[: count * block_size].reshape(count, block_size)
    return mix64(mix64(grid * _lanes(block_size) + np.uint64(1)).sum(axis=1, dtype=np.uint64))


def chain(parent: int, content_hashes: Sequence[int]) -> list[BlockId]:
    """Identities of blocks that follow a block whose identity is `parent`."""
    identities: list[BlockId] = []
    current = parent
    for content in content_hashes:
        current = (current * _BASE + content) & _MASK
        identities.append(current)
    return identities


def identities(
    tokens: npt.NDArray[np.uint32] | Sequence[int],
    block_size: int,
    adapter: str | None = None,
    parent: BlockId | None = None,
    *,
    native: bool = True,
) -> list[BlockId]:
    """Identities of every full block of a prompt's tokens, all at once: the chain unrolled
    is id_i = B^i * (p * B + sum_{j<=i} c_j * B^-j), p the parent's identity (the seed for
    a prompt's first block): a cumulative sum, scaled (B is odd, hence invertible mod 2^64).
    `parent` continues a chain: blocks that follow the block of that identity. A uint32
    array (what the tokenizer and the events give) is named in C where the extension is
    built (`kinference.native`, the same bits; `native=False`: numpy)."""
    first = seed(adapter) if parent is None else parent
    loaded = load_chain() if native else None
    if (
        loaded is not None
        and isinstance(tokens, np.ndarray)
        and tokens.dtype == np.uint32
        and tokens.ndim == 1
        and tokens.flags.c_contiguous
        and block_size >= 1
    ):
        return loaded.identities(tokens.data, block_size, first)
    content = _contents(tokens, block_size)
    if not len(content):
        return []
    powers, inverse = _powers(len(content) + 1)
    scaled = np.cumsum(content * inverse[: len(content)], dtype=np.uint64)
    start = np.uint64((first * _BASE) & _MASK)
    chained = (scaled + start) * powers[: len(content)]
    result: list[BlockId] = chained.tolist()
    return result


def _powers(count: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """(B^j, B^-j) for j < count (at least), mod 2^64."""
    return _powers_of(1 << max(count - 1, 1).bit_length())


@functools.lru_cache(maxsize=8)
def _powers_of(size: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """(B^j, B^-j) for j < size, a power of two (so that few sizes are ever cached)."""
    base = np.full(size, _BASE, dtype=np.uint64)
    base[0] = 1
    inverse = np.full(size, _BASE_INVERSE, dtype=np.uint64)
    inverse[0] = 1
    return np.cumprod(base, dtype=np.uint64), np.cumprod(inverse, dtype=np.uint64)

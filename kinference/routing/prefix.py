"""Prefix-cache affinity: which workers have probably cached a prompt's leading blocks.

Prompts are cut into blocks named by chained hashes (`kinference.routing.blocks`). Each
worker has an LRU of the block hashes routed to it, bounded to roughly what its KV cache can
hold; a request's affinity to a worker is the share of its leading blocks that worker holds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from pydantic import PositiveInt

from kinference.routing.plugins.config import PluginConfig
from kinference.routing.prefix_capacity import CapacitySource
from kinference.routing.prefix_store import BlockStore, new_store


class PrefixIndexConfig(PluginConfig):
    """How prompts are cut into blocks for the approximate prefix index (`routing.prefix`)."""

    block_bytes: PositiveInt = 64  # bytes of UTF-8 prompt text per block (GIE: 64)
    # Blocks hashed per request: 64 KiB of leading text, past long shared documents; the
    # hashing is vectorised (~0.1 µs a block) and continued from a known beginning.
    max_blocks: PositiveInt = 1024
    lru_blocks_per_worker: PositiveInt = 50_000  # block hashes remembered per worker


class PrefixIndex:
    """Block hashes per worker slot (LRU-bounded) and the reverse map for matching.

    Eviction-aware: each worker's LRU is bounded by the smaller of `blocks_per_worker` and
    its estimated capacity (`capacity`): the size its engine publishes (`report`, in index
    blocks), lowered to what it was seen to keep. When a worker reports fewer cached tokens
    than the index predicted (`shortfall`), that is the age (distinct blocks recorded on it
    since: `prefix_store.MAX_WALK`) of the first missing block (the blocks themselves stay:
    the request prefilled them again); a hit on an older block raises the learned estimate
    again (`confirmed`), never above the engine's own size.

    A Pick's own record may wait (`record_later`) until its answer is on its way: it is
    applied at `flush`, or first thing in any other call, so every caller sees the index
    eager recording would have left (~40-90 µs of a 48 KB Pick, off the gateway's hop).

    The blocks themselves live in a `BlockStore` (`kinference.routing.prefix_store`): the
    native one when it was built, else the Python reference; `store` forces one.
    """

    def __init__(self, blocks_per_worker: int, store: BlockStore | None = None) -> None:
        self.blocks_per_worker = blocks_per_worker
        self._store = new_store() if store is None else store
        # slot -> estimated blocks it really keeps: the smaller of the two below
        self.capacity: dict[int, int] = {}
        self.reported: dict[int, int] = {}  # slot -> blocks its engine says it holds
        self._learned: dict[int, int] = {}  # slot -> blocks it was seen to keep
        self._last: dict[int, Sequence[int]] = {}  # slot -> the blocks it recorded last
        # The last `match` (its hashes object, the index version, the answer), which `held`
        # reuses at the same Pick; the version counts every change of who holds what.
        self._version = 0
        self._matched: tuple[Sequence[int], int, dict[int, int]] | None = None
        self._later: list[tuple[int, Sequence[int]]] = []  # records not applied yet

    def __len__(self) -> int:
        """Distinct blocks indexed."""
        self.flush()
        return len(self._store)

    def record_later(self, slot: int, hashes: Sequence[int]) -> None:
        """`record`, applied at the next `flush` (or call of any other method)."""
        self._later.append((slot, hashes))

    def flush(self) -> None:
        """Apply the records that wait, in order."""
        while self._later:
            later, self._later = self._later, []
            for slot, hashes in later:
                self._record(slot, hashes)

    def footprint(self, slots: npt.NDArray[np.intp]) -> list[float]:
        """Blocks held per slot: how full each worker's cache is, as far as we know."""
        self.flush()
        return self._store.footprint(slots.tolist())

    def match(self, hashes: Sequence[int]) -> dict[int, int]:
        """Worker slot -> number of leading blocks of `hashes` it holds (only slots with > 0;
        a binary search per holder of the first block, `BlockStore.match`)."""
        self.flush()
        if not hashes:
            return {}
        matched = self._store.match(hashes)
        if matched:
            self._matched = (hashes, self._version, matched)
        return matched

    def record(self, slot: int, hashes: Sequence[int]) -> None:
        """Remember that `slot` now caches these blocks (most recent: the earliest).

        The same blocks recorded again right after themselves (a retry, the same prompt
        twice in a row; the hasher hands back one tuple for one prefix) change nothing: they
        are already the most recent, in order, and push nothing else further back."""
        self.flush()
        self._record(slot, hashes)

    def _record(self, slot: int, hashes: Sequence[int]) -> None:
        if hashes and self._last.get(slot) is hashes:
            return
        self._store.record(slot, hashes, self._bound(slot))
        self._last[slot] = hashes
        self._version += 1

    def _bound(self, slot: int) -> int:
        return min(self.blocks_per_worker, self.capacity.get(slot, self.blocks_per_worker))

    def report(self, slot: int, blocks: int) -> None:
        """`slot`'s engine holds `blocks` index blocks (its published KV-cache size,
        converted): its capacity from the next record on, unless it was seen to keep less."""
        if self.reported.get(slot) != blocks:
            self.flush()  # a waiting record trims to the bound it was made under
            self.reported[slot] = blocks
            self._settle(slot)

    def source(self, slot: int) -> CapacitySource:
        """Which estimate bounds `slot`'s entry (`kinference_prefix_capacity_blocks`)."""
        known = self.capacity.get(slot)
        if known is None or known >= self.blocks_per_worker:
            return CapacitySource.BOUND
        return CapacitySource.ENGINE if known == self.reported.get(slot) else CapacitySource.LEARNED

    def _settle(self, slot: int) -> None:
        known = [kept for kept in (self._learned.get(slot), self.reported.get(slot)) if kept]
        if known:
            self.capacity[slot] = min(known)
        else:
            self.capacity.pop(slot, None)

    def held(self, slot: int, hashes: Sequence[int]) -> tuple[int, int | None]:
        """(leading blocks of `hashes` that `slot` holds, distinct blocks recorded on it
        since the deepest of them was: its age, `prefix_store.MAX_WALK`): read at Pick,
        before the pick refreshes them."""
        self.flush()
        memo = self._matched
        known = 0
        if memo is not None and memo[0] is hashes and memo[1] == self._version:
            known = memo[2].get(slot, 0)  # what `match` found at this Pick
        return self._store.held(slot, hashes, known)

    def shortfall(self, slot: int, hashes: Sequence[int], kept: int, age: int | None) -> None:
        """`slot` had only the first `kept` blocks of `hashes` cached although the index
        said more, the deepest predicted block being `age` blocks old at the pick. The
        report comes at the request's final token, after it prefilled the rest again: the
        engine holds them now (as recently as the pick recorded them), so they stay. What
        it teaches is the capacity: when it kept less than half (a block boundary's
        rounding is no eviction), the estimate drops to that age at once (an LRU cache that
        lost a block this old holds no more than that; by a tenth a report, it took ~33
        reports from 50,000 to an engine's 1,536 blocks, h101) but never below the prompt's
        blocks, and the entry is trimmed to it: the blocks older than the missing one were
        evicted before it. A deeper hit raises it again (`confirmed`)."""
        self.flush()
        if not self._store.has(slot) or kept >= len(hashes):
            return
        held = self._store.count(slot, hashes)
        if age is not None and kept < held / 2:
            floor = max(len(hashes), 1)  # never below one prompt's worth
            known = self.capacity.get(slot, self.blocks_per_worker)
            self._learned[slot] = max(min(known, age), floor)
            self._settle(slot)
            self._last.pop(slot, None)
            self._version += 1
            self._store.trim(slot, self._bound(slot))

    def confirmed(self, slot: int, age: int | None) -> None:
        """`slot` had the predicted blocks cached, the deepest `age` blocks old at the
        pick: a capacity estimate below that age was too small."""
        self.flush()
        known = self._learned.get(slot)
        if known is not None and age is not None and age > known:
            self._learned[slot] = age
            self._settle(slot)

    def forget(self, slot: int) -> None:
        """Drop everything a worker held (it left the pool or restarted)."""
        self.flush()
        self._store.forget(slot)
        self._last.pop(slot, None)
        self._version += 1
        for estimates in (self.capacity, self.reported, self._learned):
            estimates.pop(slot, None)

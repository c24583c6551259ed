"""Which worker holds which KV block, as the engines' own events say.

Blocks are keyed by our identities (`kvcache.blocks`), never by the engine's hashes; each
worker keeps the map from its engine's hashes to our identities, because `BlockRemoved`
names blocks by engine hash only and `BlockStored` names the parent by engine hash. A
stored block whose parent we never saw stored (we joined late, or missed events) cannot be
named and is skipped: it counts as not cached, and so does everything after it.

`longest` walks the prompt's blocks from the first, dropping each worker at its first block
it does not hold (exact), and past `EXACT_BLOCKS` binary-searches, so a Pick on a 1 MiB
prompt (~16k blocks) costs a few hundred lookups, not 16k.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kinference.kvcache.blocks import BlockId, identities, seed
from kinference.kvevents.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EngineHash,
    Event,
    on_gpu,
)

EXACT_BLOCKS = 512  # leading blocks matched exactly (8192 tokens of 16-token blocks)


@dataclass
class _Worker:
    named: dict[EngineHash, BlockId] = field(default_factory=dict)  # engine hash -> identity
    held: dict[BlockId, int] = field(default_factory=dict)  # identity -> engine hashes naming it
    orphans: int = 0  # stored blocks skipped: their parent was unknown


class BlockIndex:
    """Block identity -> workers holding it, fed by decoded events; workers are slots."""

    def __init__(self, max_blocks_per_worker: int = 1_000_000) -> None:
        self.max_blocks_per_worker = max_blocks_per_worker
        self._holders: dict[BlockId, set[int]] = {}
        self._workers: dict[int, _Worker] = {}

    def __len__(self) -> int:
        """Distinct blocks held by any worker."""
        return len(self._holders)

    def blocks(self, slot: int) -> int:
        worker = self._workers.get(slot)
        return len(worker.held) if worker is not None else 0

    def orphans(self, slot: int) -> int:
        worker = self._workers.get(slot)
        return worker.orphans if worker is not None else 0

    def apply(self, slot: int, events: Iterable[Event]) -> tuple[list[BlockId], list[BlockId]]:
        """Apply a batch's events; answers the identities (stored, removed) by it."""
        worker = self._workers.setdefault(slot, _Worker())
        stored: list[BlockId] = []
        removed: list[BlockId] = []
        for event in events:
            if isinstance(event, BlockStored):
                if on_gpu(event.medium):
                    self._stored(slot, worker, event, stored)
            elif isinstance(event, BlockRemoved):
                if on_gpu(event.medium):
                    self._removed(slot, worker, event.block_hashes, removed)
            elif isinstance(event, AllBlocksCleared):
                self.forget(slot)
                worker = self._workers.setdefault(slot, _Worker())
        return stored, removed

    def _stored(
        self, slot: int, worker: _Worker, event: BlockStored, touched: list[BlockId]
    ) -> None:
        if event.parent is None:
            parent = seed(event.lora)
        elif (known := worker.named.get(event.parent)) is not None:
            parent = known
        else:
            worker.orphans += len(event.block_hashes)
            return
        names = identities(event.token_ids, event.block_size, parent=parent)
        touched.extend(names)
        for engine_hash, identity in zip(event.block_hashes, names, strict=True):
            if len(worker.held) >= self.max_blocks_per_worker:
                worker.orphans += 1  # a bound against a publisher that never removes
                continue
            previous = worker.named.get(engine_hash)
            if previous == identity:
                continue  # stored twice: once is enough
            if previous is not None:
                self._drop(slot, worker, previous)
            worker.named[engine_hash] = identity
            worker.held[identity] = worker.held.get(identity, 0) + 1
            self._holders.setdefault(identity, set()).add(slot)

    def _removed(
        self, slot: int, worker: _Worker, hashes: Sequence[EngineHash], touched: list[BlockId]
    ) -> None:
        for engine_hash in hashes:
            identity = worker.named.pop(engine_hash, None)
            if identity is not None:
                touched.append(identity)
                self._drop(slot, worker, identity)

    def _drop(self, slot: int, worker: _Worker, identity: BlockId) -> None:
        count = worker.held.get(identity, 0) - 1
        if count > 0:
            worker.held[identity] = count
            return
        worker.held.pop(identity, None)
        holders = self._holders.get(identity)
        if holders is not None:
            holders.discard(slot)
            if not holders:
                del self._holders[identity]

    def forget(self, slot: int) -> None:
        """Drop everything a worker holds (its cache was cleared, or we lost track)."""
        worker = self._workers.pop(slot, None)
        if worker is None:
            return
        for identity in worker.held:
            holders = self._holders.get(identity)
            if holders is not None:
                holders.discard(slot)
                if not holders:
                    del self._holders[identity]

    def longest(self, identities: Sequence[BlockId], slots: Iterable[int]) -> dict[int, int]:
        """Slot -> number of leading blocks of `identities` it holds, for `slots`.

        Exact over the first `EXACT_BLOCKS` blocks (a walk that drops each worker at its first
        missing block); past them, a binary search per remaining worker, which assumes that
        a worker holding a block holds its ancestors (engines evict a sequence's blocks
        tail first, and their own cache lookup stops at the first missing block anyway).
        So the cost on Pick is bounded: ~EXACT_BLOCKS lookups plus log2(blocks) per worker.
        """
        result = dict.fromkeys(slots, 0)
        alive = set(result)
        exact = min(len(identities), EXACT_BLOCKS)
        for depth in range(exact):
            holders = self._holders.get(identities[depth])
            if not holders:
                for slot in alive:
                    result[slot] = depth
                return result
            if alive <= holders:
                continue
            for slot in alive - holders:
                result[slot] = depth
            alive &= holders
            if not alive:
                break
        for slot in alive:
            result[slot] = self._search(slot, identities, exact)
        return result

    def held_anywhere(self, identity: BlockId) -> bool:
        """Whether any worker holds the block (one dict lookup: safe from another thread)."""
        return identity in self._holders

    def holds(self, slot: int, identity: BlockId) -> bool:
        return slot in self._holders.get(identity, ())

    def _search(self, slot: int, identities: Sequence[BlockId], start: int) -> int:
        lo, hi = start, len(identities)  # slot holds identities[:lo]; find the largest lo
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if slot in self._holders.get(identities[mid - 1], ()):
                lo = mid
            else:
                hi = mid - 1
        return lo

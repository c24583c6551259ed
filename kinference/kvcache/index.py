"""Which worker holds which KV block, as the engines' own events say.

Blocks are keyed by our identities (`kvcache.blocks`), never by the engine's hashes; each
worker keeps the map from its engine's hashes to our identities, because `BlockRemoved`
names blocks by engine hash only and `BlockStored` names the parent by engine hash. A
stored block whose parent we never saw stored (we joined late, or missed events) cannot be
named and is skipped: it counts as not cached, and so does everything after it.

State is per worker (two dicts), and every step is a C-level bulk operation on them
(`dict.update`, `map` of a dict method): an engine announces a long prompt's blocks in
steps of hundreds, and all of them are applied on the event loop, between Picks.

`longest` asks each worker for its run of the prompt's leading blocks (exact over the first
`EXACT_BLOCKS`, then a binary search), so a Pick on a 1 MiB prompt (~16k blocks) costs a few
hundred lookups per worker, not 16k; and the exact walk starts past the longest run that
worker is known to hold (`kvcache.runs`: a shared system prompt is not looked up block by
block again on every Pick).
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from kinference.kvcache.blocks import BlockId, identities, seed
from kinference.kvcache.runs import KnownRuns
from kinference.kvevents.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EngineHash,
    Event,
    TokenIds,
    on_gpu,
)

EXACT_BLOCKS = 512  # leading blocks matched exactly (8192 tokens of 16-token blocks)


@dataclass
class _Worker:
    named: dict[EngineHash, BlockId] = field(default_factory=dict)  # engine hash -> identity
    held: dict[BlockId, int] = field(default_factory=dict)  # identity -> engine hashes naming it
    orphans: int = 0  # stored blocks skipped: their parent was unknown
    known: KnownRuns = field(default_factory=KnownRuns)  # runs of `held` found by walks
    tail: BlockId | None = None  # the last stored event's last block, if it was all kept


class Applied(NamedTuple):
    """What a batch did to a worker: the identities it now holds by the batch's stores and
    those that left it, both since the batch's last `AllBlocksCleared` if it had one
    (`cleared`: everything held before that is gone, the batch's own stores before it
    among them: `cleared_stored`)."""

    stored: list[BlockId]
    removed: list[BlockId]
    cleared: bool = False
    cleared_stored: tuple[BlockId, ...] = ()


class BlockIndex:
    """Block identity -> workers holding it, fed by decoded events; workers are slots."""

    def __init__(self, max_blocks_per_worker: int = 1_000_000) -> None:
        self.max_blocks_per_worker = max_blocks_per_worker
        self._workers: dict[int, _Worker] = {}

    def __len__(self) -> int:
        """Distinct blocks held by any worker (a union: for tests and diagnostics)."""
        return len(set().union(*(w.held for w in list(self._workers.values()))))

    def blocks(self, slot: int) -> int:
        worker = self._workers.get(slot)
        return len(worker.held) if worker is not None else 0

    def orphans(self, slot: int) -> int:
        worker = self._workers.get(slot)
        return worker.orphans if worker is not None else 0

    def apply(self, slot: int, events: Iterable[Event]) -> Applied:
        """Apply a batch's events; answers what they did (`Applied`)."""
        worker = self._workers.setdefault(slot, _Worker())
        applied = Applied([], [])
        for event in events:
            if isinstance(event, BlockStored):
                if on_gpu(event.medium):
                    self._stored(worker, event, applied)
            elif isinstance(event, BlockRemoved):
                if on_gpu(event.medium):
                    _removed(worker, event.block_hashes, applied.removed)
            elif isinstance(event, AllBlocksCleared):
                self.forget(slot)
                worker = self._workers.setdefault(slot, _Worker())
                applied = Applied([], [], True, (*applied.cleared_stored, *applied.stored))
        return applied

    def _stored(self, worker: _Worker, event: BlockStored, applied: Applied) -> None:
        parent = _parent(worker, event)
        worker.tail = None
        if parent is None:
            worker.orphans += len(event.block_hashes)
            return
        hashes, tokens = self._room(worker, event)
        names = identities(tokens, event.block_size, parent=parent)
        if self._store(worker, hashes, names, applied) and len(names) == len(event.block_hashes):
            worker.tail = names[-1] if names else None  # the next event may continue it

    def _room(self, worker: _Worker, event: BlockStored) -> tuple[Sequence[EngineHash], TokenIds]:
        """The event's hashes and tokens that fit under the worker's bound."""
        named, held = worker.named, worker.held
        hashes, tokens, size = event.block_hashes, event.token_ids, event.block_size
        if len(held) + len(hashes) > self.max_blocks_per_worker:
            # Past the bound (a publisher that never removes) the blocks after the room left
            # are not kept: not named either (a batch may hold a million blocks' tokens).
            # A hash stored again takes no room.
            room = self.max_blocks_per_worker - len(held) + sum(map(named.__contains__, hashes))
            if room < len(hashes):
                worker.orphans += len(hashes) - max(room, 0)
                hashes, tokens = hashes[: max(room, 0)], tokens[: max(room, 0) * size]
        return hashes, tokens

    def _store(
        self, worker: _Worker, hashes: Sequence[EngineHash], names: list[BlockId], applied: Applied
    ) -> bool:
        """Name and hold `names` under `hashes`; False if the bound stopped it part way."""
        named, held = worker.named, worker.held
        if (
            len(held) + len(names) <= self.max_blocks_per_worker
            and named.keys().isdisjoint(hashes)
            and held.keys().isdisjoint(names)
            and len(set(hashes)) == len(hashes)
        ):  # the usual case, new blocks under new hashes: in bulk
            named.update(zip(hashes, names, strict=True))
            held.update(dict.fromkeys(names, 1))
            applied.stored.extend(names)
            return True
        for i, (engine_hash, identity) in enumerate(zip(hashes, names, strict=True)):
            if len(held) >= self.max_blocks_per_worker:
                # A bound against a publisher that never removes: the rest is not kept (nor
                # walked one by one: a batch may name a million blocks).
                worker.orphans += len(names) - i
                return False
            previous = named.get(engine_hash)
            applied.stored.append(identity)
            if previous == identity:
                continue  # stored twice: once is enough
            if previous is not None and _drop(worker, previous):
                applied.removed.append(previous)
            named[engine_hash] = identity
            held[identity] = held.get(identity, 0) + 1
        return True

    def forget(self, slot: int) -> None:
        """Drop everything a worker holds (its cache was cleared, or we lost track)."""
        self._workers.pop(slot, None)

    def longest(self, identities: Sequence[BlockId], slots: Iterable[int]) -> dict[int, int]:
        """Slot -> number of leading blocks of `identities` it holds, for `slots`.

        Exact over the first `EXACT_BLOCKS` blocks; past them, a binary search, which
        assumes that a worker holding a block holds its ancestors (engines evict a
        sequence's blocks tail first, and their own cache lookup stops at the first missing
        block anyway). So the cost on Pick is bounded: at most EXACT_BLOCKS lookups plus
        log2(blocks) per worker, each in C.
        """
        result: dict[int, int] = {}
        exact = identities[:EXACT_BLOCKS]
        for slot in slots:
            worker = self._workers.get(slot)
            if worker is None:
                result[slot] = 0
                continue
            depth = held_run(worker.held, worker.known, exact)
            if depth == EXACT_BLOCKS < len(identities):
                depth = _search(worker.held, identities, depth)
            result[slot] = depth
        return result

    def holdings(self) -> dict[int, tuple[Mapping[BlockId, object], KnownRuns]]:
        """Slot -> the blocks it holds and its runs known held (live: read them, one lookup
        at a time, from another thread; the copy is of the slots only)."""
        return {slot: (w.held, w.known) for slot, w in list(self._workers.items())}

    def held(self, slot: int) -> Mapping[BlockId, object]:
        """The blocks `slot` holds (live; empty if it holds none)."""
        worker = self._workers.get(slot)
        return worker.held if worker is not None else {}

    def known(self, slot: int, identities: Sequence[BlockId]) -> int:
        """How many leading `identities` `slot` is known to hold (`kvcache.runs`; not
        looked up: the ones after may be held too)."""
        worker = self._workers.get(slot)
        return worker.known.start(identities) if worker is not None else 0

    def holds(self, slot: int, identity: BlockId) -> bool:
        worker = self._workers.get(slot)
        return worker is not None and identity in worker.held


def _parent(worker: _Worker, event: BlockStored) -> BlockId | None:
    """The identity a stored event's first block chains from; None if it is not known."""
    if event.continues:  # the rest of the event before it: chained to what that one kept
        return worker.tail
    if event.parent is None:
        return seed(event.lora)
    return worker.named.get(event.parent)


def _removed(worker: _Worker, hashes: Sequence[EngineHash], left: list[BlockId]) -> None:
    """The blocks `hashes` name leave `worker`; the identities no hash names now go to
    `left` (one still named by another engine hash is still held)."""
    gone = [i for i in map(worker.named.pop, hashes, itertools.repeat(None)) if i is not None]
    held = worker.held
    if list(map(held.get, gone)).count(1) == len(gone):  # each named once: in bulk
        collections.deque(map(held.pop, gone), maxlen=0)
        left.extend(gone)
        if gone:
            worker.known.removed()  # after they left (`kvcache.runs`)
        return
    left.extend(itertools.compress(gone, [_drop(worker, identity) for identity in gone]))


def _drop(worker: _Worker, identity: BlockId) -> bool:
    """One engine hash naming `identity` no longer does: whether the block left."""
    count = worker.held.get(identity, 0) - 1
    if count > 0:
        worker.held[identity] = count
        return False
    worker.held.pop(identity, None)
    worker.known.removed()  # after it left
    return True


_RUNS = (16, 128, 1024)  # first windows looked at by `leading` (most workers stop early)
MAX_WINDOW = 4096  # ... then windows of this many: one C call each, ~0.1 ms holding the GIL


def leading(held: Mapping[BlockId, object], identities: Sequence[BlockId], start: int = 0) -> int:
    """The index of the first of `identities` at or after `start` not in `held` (their
    length if none): `map` of the dict's lookup in C, over growing windows, at most
    `MAX_WINDOW` each (called from the tokenizer thread: each call holds the GIL the event
    loop waits for, and a 1 MiB prompt has ~16k blocks)."""
    position = start
    for run in itertools.chain(_RUNS, itertools.repeat(MAX_WINDOW)):
        window = identities[position : position + run]
        if not window:
            return position
        found = list(map(held.__contains__, window))
        if False in found:
            return position + found.index(False)
        position += len(window)
    raise AssertionError("unreachable")  # pragma: no cover


def held_run(held: Mapping[BlockId, object], known: KnownRuns, blocks: Sequence[BlockId]) -> int:
    """`leading(held, blocks)`, the walk begun past the longest run of `blocks` `known`
    says `held` holds (`kvcache.runs`), and the run it finds remembered there."""
    removals = known.removals
    end = leading(held, blocks, known.start(blocks))
    known.found(blocks, end, removals)
    return end


def _search(held: dict[BlockId, int], identities: Sequence[BlockId], start: int) -> int:
    lo, hi = start, len(identities)  # held has identities[:lo]; find the largest lo
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if identities[mid - 1] in held:
            lo = mid
        else:
            hi = mid - 1
    return lo

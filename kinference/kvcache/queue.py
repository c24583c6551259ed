"""A worker's requests routed there and not finished, in order, as its engine will run them.

What a request sent to a worker now finds cached there depends on what the engine does
first: it runs the requests ahead one after another (as many at once as fit), and each,
when it is scheduled, takes the blocks of its prompt still held (Dynamo's mocker any of
them, vLLM those before the first missing one: the same, as tails go first), computes the
rest and then its output (decode) blocks, evicting least recently used blocks that no running
request uses; when it finishes, its blocks become evictable again, tail first, after
every block used before (vLLM's free-block queue; Dynamo's mocker does the same). So the
blocks a request ahead shares with this prompt are used again before this one runs (kept,
or recomputed if they were evicted meanwhile), and the others age.

`survivors` replays that on the worker's eviction order (`kvcache.ageing`): the requests
that reported their first token run now (their blocks are in use: kept); the waiting ones
are scheduled in order, each evicting what it computes past the room left, from the oldest
blocks on (skipping the ones a request ahead took up), then from the blocks of the requests
ahead, oldest first, when no older block is left; then this prompt's leading blocks still
held are its predicted hit. All in C and numpy per request ahead: no Python step per block.

Only that last step depends on the prompt: `replay` does the rest, once per state of the
worker (its queue, its cache, its eviction order, the room left), and `Replayed.surviving`
answers each prompt from it (`PoolCaches` keeps it until that state changes: a Pick asks
every candidate, the busiest ones' replays ~1.4 ms each with 8 requests ahead).
"""

from __future__ import annotations

import collections
import itertools
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kinference.kvcache.ageing import UNKNOWN, Order, WorkerAges
from kinference.kvcache.blocks import BlockId

QUEUE_TTL_S = 600.0  # a request in flight longer than this no longer counts (lost report)
MAX_QUEUED = 1024  # requests per worker
# Blocks of waiting requests replayed by name per replay of a worker (~0.27 µs each); the ones
# past it count as computed whole (they evict, and keep nothing of this prompt).
MAX_REPLAYED_BLOCKS = 8192


@dataclass(slots=True)
class Queued:
    """One request routed to the worker: its prompt's blocks as named so far, how many more
    it has (a lazily tokenized prompt's rest, estimated), the output blocks it will add, and
    whether the engine runs it already (its first token came)."""

    blocks: tuple[BlockId, ...]
    unnamed: int
    decode: int
    since: float
    running: bool = False


@dataclass
class EngineQueue:
    """One worker's requests in flight, by the caller's key (the pick's identity), in order."""

    requests: OrderedDict[int, Queued] = field(default_factory=OrderedDict)
    version: int = 0  # changes made through these methods (a cached `replay` is of one)

    def add(self, key: int, request: Queued) -> None:
        self.version += 1
        self.requests[key] = request
        if len(self.requests) > MAX_QUEUED:
            self.requests.popitem(last=False)

    def started(self, key: int) -> None:
        found = self.requests.get(key)
        if found is not None:
            self.version += 1
            found.running = True

    def named(self, key: int, blocks: tuple[BlockId, ...]) -> None:
        """A lazily tokenized prompt's blocks, now all named."""
        found = self.requests.get(key)
        if found is not None:
            self.version += 1
            found.blocks, found.unnamed = blocks, 0

    def finish(self, key: int) -> Queued | None:
        found = self.requests.pop(key, None)
        if found is not None:
            self.version += 1
        return found

    def expire(self, now: float) -> None:
        cutoff = now - QUEUE_TTL_S
        old = [
            k for k, q in itertools.takewhile(lambda i: i[1].since < cutoff, self.requests.items())
        ]
        if old:
            self.version += 1
        collections.deque(map(self.requests.pop, old), maxlen=0)

    def work(self) -> int:
        """Blocks the requests ahead may still store, at most (their prompts and output)."""
        return sum(len(q.blocks) + q.unnamed + q.decode for q in self.requests.values())


@dataclass
class _Replay:
    """The eviction order while the requests ahead are scheduled."""

    order: Order
    total: int  # blocks in the old order
    held: Mapping[BlockId, object]
    room: int
    evicted: int = 0  # how far eviction has gone through the old order (its places)
    # old places now used by requests ahead (sorted)
    taken: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    newer: dict[BlockId, None] = field(default_factory=dict)  # their blocks, oldest first
    outputs: int = 0  # output blocks of theirs in `newer`

    def present(
        self, blocks: Sequence[BlockId], ranks: npt.NDArray[np.int64], newer: npt.NDArray[np.bool_]
    ) -> npt.NDArray[np.bool_]:
        """Which of `blocks` (of those old `ranks`, those `newer`) are held at this point."""
        held = np.fromiter(map(self.held.__contains__, blocks), bool, len(blocks))
        found: npt.NDArray[np.bool_] = (held & (ranks != UNKNOWN) & (ranks >= self.evicted)) | newer
        return found

    def newer_of(self, blocks: Sequence[BlockId]) -> npt.NDArray[np.bool_]:
        return np.fromiter(map(self.newer.__contains__, blocks), bool, len(blocks))

    def use(
        self,
        blocks: Sequence[BlockId],
        ranks: npt.NDArray[np.int64],
        newer: npt.NDArray[np.bool_],
        output: int,
    ) -> None:
        """A request ahead uses `blocks` (hit or computed) and adds `output` blocks: all
        newest, freed from the output's end (its tail first); the old places of the blocks
        it hit leave the old order."""
        ranks = ranks[~newer & (ranks != UNKNOWN) & (ranks >= self.evicted)]
        if len(ranks):
            self.taken = np.sort(np.concatenate((self.taken, ranks)))
        collections.deque(map(self.newer.pop, reversed(blocks), itertools.repeat(None)), maxlen=0)
        self.outputs += output  # output blocks have no name here: negative keys
        self.newer.update(dict.fromkeys(range(-self.outputs, -self.outputs + output)))
        self.newer.update(dict.fromkeys(reversed(blocks)))

    def compute(self, count: int, own: Sequence[BlockId]) -> None:
        """`count` new blocks are stored: into the room left, else evicting the oldest."""
        fits = min(self.room, count)
        self.room -= fits
        need = count - fits
        total = self.total
        while need > 0 and self.evicted < total:  # skip the places requests ahead took
            end = min(self.evicted + need, total)
            skipped = int(
                np.searchsorted(self.taken, end) - np.searchsorted(self.taken, self.evicted)
            )
            need -= (end - self.evicted) - skipped
            self.evicted = end
        if need > 0:  # then the blocks of the requests ahead, oldest first, not `own`
            keep = set(own)
            gone = list(itertools.islice((b for b in self.newer if b not in keep), need))
            collections.deque(map(self.newer.pop, gone), maxlen=0)


@dataclass(frozen=True, slots=True)
class Replayed:
    """A worker's eviction order once its requests ahead are scheduled (`replay`): what any
    prompt sent now finds of its match there. Valid while the worker's state is as it was."""

    replay: _Replay | None  # None: the requests ahead fit in the room left, nothing evicted

    def surviving(self, blocks: Sequence[BlockId], depth: int) -> int:
        """`survivors` of a prompt's leading `blocks`, `depth` of them held or pending."""
        replay = self.replay
        if depth == 0 or replay is None:
            return depth
        prefix = blocks[: depth + len(replay.newer)]  # and what the requests ahead store of it
        found = replay.present(prefix, replay.order.ranks(prefix), replay.newer_of(prefix))
        gone = np.flatnonzero(~found)
        return int(gone[0]) if len(gone) else depth


def survivors(
    queue: EngineQueue,
    ages: WorkerAges,
    *,
    held: Mapping[BlockId, object],
    room: int,
    blocks: Sequence[BlockId],
    depth: int,
) -> int:
    """How many leading `blocks` the worker will hold when a request sent now is scheduled
    there, behind `queue`: of the first `depth` (held or pending there now) those not
    evicted meanwhile, and past them those the requests ahead will have stored."""
    if depth == 0:
        return depth
    return replay(queue, ages, held=held, room=room).surviving(blocks, depth)


def replay(
    queue: EngineQueue, ages: WorkerAges, *, held: Mapping[BlockId, object], room: int
) -> Replayed:
    """The requests ahead in `queue` scheduled on the worker's eviction order (`ages`), its
    cache holding `held` with `room` blocks left: the part of `survivors` no prompt changes."""
    if queue.work() <= room:
        return Replayed(None)
    order = ages.order()
    replay = _Replay(order, len(ages.touched), held, room)
    waiting = []
    for request in queue.requests.values():
        if request.running:  # in use until it ends; its output still to come
            ranks = order.ranks(request.blocks)
            replay.use(request.blocks, ranks, replay.newer_of(request.blocks), request.decode)
        else:
            waiting.append(request)
    for request in queue.requests.values():
        if request.running:  # what it has not stored yet, and its output
            unstored = sum(1 for _ in itertools.filterfalse(held.__contains__, request.blocks))
            replay.compute(unstored + request.unnamed + request.decode, request.blocks)
    budget = MAX_REPLAYED_BLOCKS
    for request in waiting:  # computes the blocks it does not find
        budget -= len(request.blocks)
        if budget < 0:  # past the bound: counted as computed whole, without names
            replay.compute(len(request.blocks) + request.unnamed + request.decode, ())
            continue
        ranks, newer = order.ranks(request.blocks), replay.newer_of(request.blocks)
        missing = len(request.blocks) - int(replay.present(request.blocks, ranks, newer).sum())
        replay.use(request.blocks, ranks, newer, request.decode)
        replay.compute(missing + request.unnamed + request.decode, request.blocks)
    return Replayed(replay)

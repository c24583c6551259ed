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

from kinference.kvcache.ageing import WorkerAges
from kinference.kvcache.blocks import BlockId
from kinference.kvcache.replan import planned
from kinference.kvcache.replayed import Replayed

QUEUE_TTL_S = 600.0  # a request in flight longer than this no longer counts (lost report)
MAX_QUEUED = 1024  # requests per worker


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
    return planned(queue, ages, held=held, room=room)[0]

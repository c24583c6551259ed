"""One precise pool's cache state: the engines' blocks (`BlockIndex`, fed by their
events), each worker's trust, the blocks routed there and not stored yet (pending), the
workers' eviction order (`kvcache.ageing`) and requests in flight (`kvcache.queue`), and
what that predicts for a request sent now (its surviving match, whether it fits:
`kvcache.memory`). Pure state: the event subscriber writes it, routing reads it; no I/O.
"""

from __future__ import annotations

import collections
import itertools
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from kinference.kvcache.ageing import WorkerAges
from kinference.kvcache.blocks import BlockId, PromptBlocks
from kinference.kvcache.index import BlockIndex
from kinference.kvcache.memory import FITS, Room, room
from kinference.kvcache.pending import expect, expire, fresh, unnote
from kinference.kvcache.queue import EngineQueue, Queued
from kinference.kvcache.reach import Reach
from kinference.kvcache.replan import Plan, planned
from kinference.kvcache.replayed import Replayed
from kinference.kvcache.tickets import LazyPrompts
from kinference.kvevents.events import Event
from kinference.kvevents.trust import WorkerTrust


@dataclass(frozen=True, slots=True)
class Request:
    """A routed request as the engine queue model needs it: its key until it is released
    (`id` of its `LocalChoice`), its output tokens at most (0: unknown) and when it went."""

    key: int
    output_tokens: int
    now: float


@dataclass
class PoolCaches(LazyPrompts):
    """One precise pool: its block size, index and each worker's trust, by slot; and the
    blocks of requests routed there that its events have not stored yet (`pending`).
    Its lazily tokenized prompts' rests are `LazyPrompts`'s (`kvcache.tickets`)."""

    ref: str
    block_size: int
    index: BlockIndex = field(default_factory=BlockIndex)
    trust: dict[int, WorkerTrust] = field(default_factory=dict)
    endpoints: dict[int, str] = field(default_factory=dict)
    pending: dict[int, dict[BlockId, float]] = field(default_factory=dict)
    # Blocks held when a request routed there expected them: -> its key (`kvcache.pending`).
    reused: dict[int, dict[BlockId, int]] = field(default_factory=dict)
    # Lazily tokenized prompts (`PromptBlocks.ticket`): the worker each went to, and the
    # blocks of the ones tokenized to the end before their routing was known.
    claims: OrderedDict[int, int] = field(default_factory=OrderedDict)  # -> slot
    rests: OrderedDict[int, tuple[BlockId, ...]] = field(default_factory=OrderedDict)
    ages: dict[int, WorkerAges] = field(default_factory=dict)
    queues: dict[int, EngineQueue] = field(default_factory=dict)  # requests in flight
    tickets: dict[int, tuple[int, int]] = field(default_factory=dict)  # -> slot, queue key
    clock: Callable[[], float] = time.monotonic
    predict_evictions: bool = True  # count blocks the ageing model expects gone as gone
    peaks: dict[int, int] = field(default_factory=dict)  # most blocks each worker held
    # Blocks a worker holds at most (its KV cache), learned from the workers that evicted.
    capacity: int | None = None
    # Each worker's queue replayed (`kvcache.queue.replay`), with the queue's version and
    # the room left it is of; dropped by any change to the worker's blocks or ages.
    replays: dict[int, tuple[int, int, Replayed]] = field(default_factory=dict)
    # What each worker's replays saw of its requests ahead (`kvcache.replan`), to replay
    # again after event batches, touches and queue changes; dropped by a clear.
    plans: dict[int, Plan] = field(default_factory=dict)

    def apply(self, slot: int, events: Iterable[Event]) -> None:
        """A batch from `slot`'s engine: into the index; what it names is no longer pending;
        what it stores was just used; that it removes any says its cache is full (a clear
        says nothing of its size: what was held is forgotten, not evicted); what it removes
        that a waiting request will use is pending again."""
        stored, removed, cleared, cleared_stored = self.index.apply(slot, events)
        self.replays.pop(slot, None)
        self._noted(slot, cleared, stored, removed)
        if cleared:
            self.ages.pop(slot, None)
            self.reused.pop(slot, None)
        waiting = self.pending.get(slot)
        if waiting:  # in C: a long prompt's step names hundreds of blocks
            for named in (stored, removed, cleared_stored):
                collections.deque(map(waiting.pop, named, itertools.repeat(None)), maxlen=0)
        if removed and self.reused.get(slot):
            self._evicted_before_use(slot, removed)
        ages = self._ages(slot)
        if stored:  # (most of an engine's batches only store, or only remove)
            ages.touch(stored)
        if removed:
            ages.removed(removed)
        peak = self.peaks[slot] = max(self.peaks.get(slot, 0), self.index.blocks(slot))
        if removed:
            self.capacity = max(self.capacity or 0, peak)

    def _evicted_before_use(self, slot: int, removed: Sequence[BlockId]) -> None:
        """`removed` left the worker: those held when a request still waiting there was
        routed will be computed and stored again when it runs (`kvcache.pending`)."""
        reused, queue = self.reused[slot], self.queues.get(slot)
        noted = [(b, reused[b]) for b in filter(reused.__contains__, removed)]
        if not noted or queue is None:
            return
        requests = queue.requests
        again = [b for b, key in noted if (q := requests.get(key)) is not None and not q.running]
        if again:
            self.expect(slot, again, self.clock())

    def _noted(self, slot: int, cleared: bool, *named: Sequence[BlockId]) -> None:
        """Blocks a batch or a touch names to the worker's plan (`kvcache.replan`): their
        keys or whether they are held change; a clear drops it."""
        plan = self.plans.get(slot)
        if plan is not None and (cleared or not all(map(plan.note, named))):
            del self.plans[slot]

    def _ages(self, slot: int) -> WorkerAges:
        """The worker's eviction order, to change: its replay is dropped."""
        self.replays.pop(slot, None)
        found = self.ages.get(slot)
        if found is None:
            found = self.ages[slot] = WorkerAges()
        return found

    def forget(self, slot: int) -> None:
        self.index.forget(slot)
        self.unclaim(slot)
        self.pending.pop(slot, None)
        self.reused.pop(slot, None)
        self.ages.pop(slot, None)
        self.peaks.pop(slot, None)
        self.queues.pop(slot, None)
        self.replays.pop(slot, None)
        self.plans.pop(slot, None)

    def sent(self, slot: int, prompt: PromptBlocks, cached_blocks: int, request: Request) -> None:
        """A request went to `slot`: its matched blocks were just used; the ones it will
        store are pending there; it joins the worker's queue (`kvcache.queue`)."""
        usable = max(prompt.tokens - 1, 0) // prompt.block_size
        self._noted(slot, False, prompt.blocks[:cached_blocks])
        self._ages(slot).touch(prompt.blocks[:cached_blocks])
        new = prompt.blocks[cached_blocks:usable]
        if new:
            self.expect(slot, new, request.now, request.key)
        queue = self.queues.get(slot)
        if queue is None:
            queue = self.queues[slot] = EngineQueue()
        queue.expire(request.now)
        whole = prompt.tokens // prompt.block_size  # an engine caches its full blocks
        unnamed = max(whole - len(prompt.blocks), 0) if not prompt.exact else 0
        output = (prompt.tokens % prompt.block_size + request.output_tokens) // prompt.block_size
        queue.add(request.key, Queued(prompt.blocks, unnamed, output, request.now))
        if prompt.ticket and not prompt.exact:
            self.ticketed(prompt.ticket, slot, request.key)

    def started(self, slot: int, key: int) -> None:
        """The engine runs the request `key` (its first token came): the blocks it uses
        are no longer evicted before it runs."""
        queue = self.queues.get(slot)
        if queue is not None:
            queue.started(key)
            self._ran(slot, key, queue.requests.get(key))

    def stored(self, slot: int, key: int) -> bool:
        """Whether the events that store the request `key`'s blocks came: its prompt named
        to the end, and its last blocks not pending on the worker (one of the last two is
        the last expected: `sent`; a prompt's blocks are stored in order). False for a
        request not in the worker's queue."""
        queue = self.queues.get(slot)
        queued = queue.requests.get(key) if queue is not None else None
        if queued is None or queued.unnamed or not queued.blocks:
            return False
        waiting, blocks = self.pending.get(slot), queued.blocks
        if not waiting:
            return True
        return blocks[-1] not in waiting and (len(blocks) < 2 or blocks[-2] not in waiting)

    def finished(self, slot: int, key: int) -> None:
        """The request `key` ended: its blocks the worker holds were just used (freed now:
        the last to be evicted, tail first)."""
        queue = self.queues.get(slot)
        done = queue.finish(key) if queue is not None else None
        self._ran(slot, key, done)
        if done is not None:
            held, blocks = self.index.held(slot), done.blocks
            known = self.index.known(slot, blocks)  # held, without a lookup each
            touched = [*blocks[:known], *filter(held.__contains__, blocks[known:])]
            self._noted(slot, False, touched)
            self._ages(slot).touch(touched)

    def _ran(self, slot: int, key: int, request: Queued | None) -> None:
        reused = self.reused.get(slot)
        if reused and request is not None:
            unnote(reused, key, request.blocks)

    def surviving(self, slot: int, blocks: Sequence[BlockId], depth: int) -> int:
        """How much of a match `slot` will still hold when a request sent now runs there:
        the requests ahead run first, in order (`kvcache.queue`); past the worker's
        capacity, what they compute evicts its least recently used blocks
        (`kvcache.ageing`). The replay is the worker's until its state changes (`replays`:
        a Pick asks every worker: only those whose state changed since are replayed again)."""
        state = self._replaying(slot, depth)
        if state is None:
            return depth
        queue, ages, room = state
        replayed = self._kept(slot, queue, room)
        if replayed is None:
            held, plan = self.index.held(slot), self.plans.get(slot)  # `kvcache.replan`
            replayed, self.plans[slot] = planned(queue, ages, held=held, room=room, plan=plan)
            self.replays[slot] = (queue.version, room, replayed)
        return replayed.surviving(blocks, depth)

    def replays_for(self, slot: int, depth: int) -> bool:
        """Whether `surviving` of a `depth` match on `slot` would replay the worker's queue
        now: its costly part (nothing to replay, or the replay kept, is not)."""
        state = self._replaying(slot, depth)
        if state is None:
            return False
        queue, _, room = state
        return self._kept(slot, queue, room) is None

    def _kept(self, slot: int, queue: EngineQueue, room: int) -> Replayed | None:
        """The worker's replay, if it is of its queue as it is and the room left now."""
        cached = self.replays.get(slot)
        if cached is None or cached[0] != queue.version or cached[1] != room:
            return None
        return cached[2]

    def _replaying(self, slot: int, depth: int) -> tuple[EngineQueue, WorkerAges, int] | None:
        """What `surviving` replays a `depth` match on `slot` with (the worker's queue, its
        eviction order and the room left in its cache); None: the match survives whole."""
        ages = self.ages.get(slot)
        queue = self.queues.get(slot)
        if ages is None or queue is None or self.capacity is None or not self.predict_evictions:
            return None
        if depth == 0:
            return None
        return queue, ages, self.capacity - self.index.blocks(slot)

    def room(self, slot: int, prompt: PromptBlocks, output_tokens: int) -> Room:
        """Whether a request sent to `slot` now fits in its cache beside the requests ahead
        there, or how many of them must end first (`kvcache.memory`)."""
        if self.capacity is None or not self.predict_evictions:
            return FITS
        size = prompt.block_size
        whole = prompt.tokens // size
        extra = max(whole - len(prompt.blocks), 0) + (prompt.tokens % size + output_tokens) // size
        return room(self.queues.get(slot), self.capacity, prompt.blocks, extra)

    def expect(
        self, slot: int, blocks: Sequence[BlockId], now: float, key: int | None = None
    ) -> None:
        """`blocks` will be stored on `slot`: the ones it does not hold now are pending
        there (`kvcache.pending`); the ones expected longer than the TTL ago no longer.
        The held ones are noted for the request `key`, if given, until it runs."""
        waiting = self.pending.get(slot, {})
        expire(waiting, now)
        reused = None if key is None else (self.reused.setdefault(slot, {}), key)
        self.pending[slot] = expect(waiting, blocks, self.index.held(slot), now, reused)

    def reach(self) -> Reach:
        """Follows how far some worker holds or will hold a prompt being tokenized (read
        from the tokenizer thread: see `kvcache.reach`)."""
        pending = dict(self.pending)
        held = self.index.holdings()
        slots = dict.fromkeys([*held, *pending])
        empty: tuple[dict[BlockId, int], None] = ({}, None)
        return Reach(
            (slot, blocks, pending.get(slot), known)
            for slot, (blocks, known) in ((s, held.get(s, empty)) for s in slots)
        )

    def extend(self, slot: int, blocks: Sequence[BlockId], depth: int, now: float) -> int:
        """How far past `depth` the worker holds or is about to hold the prompt's blocks
        (a binary search: a routed prompt's blocks are pending all together)."""
        waiting = self.pending.get(slot)
        if not waiting or depth >= len(blocks) or not self._has(slot, blocks[depth], now):
            return depth
        lo, hi = depth + 1, len(blocks)  # blocks[:lo] held or pending
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._has(slot, blocks[mid - 1], now):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _has(self, slot: int, identity: BlockId, now: float) -> bool:
        return fresh(self.pending.get(slot), identity, now) or self.index.holds(slot, identity)

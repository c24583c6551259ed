"""Every engine's KV events, read straight from its ZMQ PUB socket into the precise caches.

One SUB socket and one task per endpoint of the precise pools (ZMQ fans the stream out, as
Dynamo's router does), so a batch is attributed to the worker whose socket it came from;
it goes through that worker's `WorkerTrust` before its events reach the pool's index.
With a replay socket (`kvevents.replay`), missed batches are asked for, and on subscribing
all it still buffers (a PUB socket drops what it sent before); live batches wait in order
meanwhile, those the replay also brought dropped by seq (one differing from the replayed
batch of its seq is a new process's: the engine restarted during the join, and only the
live batches count). A replay is done once every missed batch came, or ends at one of its
limits (`replay.ReplayLimits`: what came is applied, the worker is a gap); at most
`concurrency` run at once. A feed stopped or replaced stops its replay too.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

import zmq.asyncio

from kinference.kvevents.events import BlockStored, Event, EventBatch
from kinference.kvevents.feed import Feed, Held
from kinference.kvevents.link import Backoff, Link, opened
from kinference.kvevents.replay import REPLAY_WORK_PER_STEP, Outcome, ReplayLimits, fetch
from kinference.kvevents.steps import Budget, Steps, cost, finish, finish_async
from kinference.kvevents.trust import Distrust, Step
from kinference.kvevents.wire import MalformedBatch, decode_seq, decode_steps
from kinference.tasks import cancel_and_wait

__all__ = ["EventSubscriber", "Feed"]  # Feed: where it long was

log = logging.getLogger(__name__)


class EventSubscriber:
    """Runs the feeds; `on_message(pool_ref, outcome)` counts what happened to each message,
    `on_reopen(pool_ref)` each socket reopened (`kvevents.link`)."""

    def __init__(
        self,
        clock: Callable[[], float],
        on_message: Callable[[str, str], None] = lambda pool, outcome: None,
        limits: ReplayLimits | None = None,
        on_reopen: Callable[[str], None] = lambda pool: None,
    ) -> None:
        self._context = zmq.asyncio.Context()
        self._limits = limits if limits is not None else ReplayLimits.of()
        self._replays = asyncio.Semaphore(self._limits.concurrency)
        self._clock = clock
        self._on_message = on_message
        self._on_reopen = on_reopen
        self.feeds: dict[tuple[str, int], Feed] = {}

    def add(self, feed: Feed) -> None:
        key = (feed.pool.ref, feed.slot)
        self.remove(*key)
        self.feeds[key] = feed
        feed.task = asyncio.get_running_loop().create_task(
            self._run(feed), name=f"kv-events {feed.endpoint}"
        )

    def remove(self, pool: str, slot: int) -> None:
        feed = self.feeds.pop((pool, slot), None)
        if feed is not None:
            feed.cancel()

    async def aclose(self) -> None:
        feeds = list(self.feeds.values())
        tasks = [t for f in feeds for t in (f.task, f.replay) if t is not None]
        self.feeds.clear()
        await cancel_and_wait(*tasks)
        self._context.destroy(linger=0)

    async def _run(self, feed: Feed) -> None:
        backoff = Backoff(feed.endpoint)
        while True:
            link = opened(self._context, feed)  # or ZMQ's refusal: tried again after a wait
            if isinstance(link, Link):
                try:  # a join asks for what was sent before we came (on reopening: if none came)
                    if feed.replay_address and not feed.replaying and feed.trust.next_seq is None:
                        feed.replaying, feed.pending, feed.pending_bytes = True, deque(), 0
                        feed.replay = asyncio.get_running_loop().create_task(self._join(feed))
                    await self._read(feed, link)
                finally:
                    link.close()
            feed.dropped()
            self._on_reopen(feed.pool.ref)
            await backoff.wait(None if isinstance(link, Link) else link)

    async def _read(self, feed: Feed, link: Link) -> None:
        """The live batches, until ZMQ gives up on the connection."""
        caught_up = True

        def drain() -> None:  # messages dropped unread: a gap, from now (`trust.overflowed`)
            for seq in link.drain():
                self._on_message(feed.pool.ref, "overflow")
                if seq is None:  # as it would be taken: malformed
                    feed.trust.on_malformed(None, self._clock())
                else:
                    feed.trust.overflowed(seq)

        while (parts := await link.take(wait=caught_up)) is not None:
            drain()  # what waits in the socket taken off it, within its byte bound
            caught_up = link.caught_up()  # no message waits behind it
            await finish_async(self.steps(feed, parts, caught_up), between=drain)
            # One batch per loop step: a backlog (a long prompt's steps, several engines
            # at once) comes from `recv` without yielding, and would hold Picks behind it.
            await asyncio.sleep(0)

    def receive(self, feed: Feed, parts: list[bytes], caught_up: bool = True) -> None:
        """One multipart message from the PUB socket, handled at once."""
        finish(self.steps(feed, parts, caught_up))

    def steps(self, feed: Feed, parts: list[bytes], caught_up: bool) -> Steps[None]:
        """One message, in bounded steps (`kvevents.steps`); `caught_up`: no other message
        waited behind it in the socket (for `WorkerTrust.arrived`)."""
        now = self._clock()
        budget = Budget()
        seq: int | None = None
        try:
            if len(parts) != 3:
                raise MalformedBatch(f"{len(parts)} frames, expected topic, seq, payload")
            number = decode_seq(parts[1])
            if number < 0:  # live batches count from 0 (-1 ends a replay's answer)
                raise MalformedBatch(f"negative sequence number {number}")
            seq = number
            batch: EventBatch | None = yield from decode_steps(parts[2], budget)
        except MalformedBatch as exc:
            # Logged once until a good one comes (a flood of them is counted, not logged).
            log.log(
                logging.DEBUG if feed.warned else logging.WARNING,
                "kv events from %s: %s",
                feed.endpoint,
                exc,
            )
            feed.warned = True
            self._on_message(feed.pool.ref, "malformed")
            batch = None
        else:
            feed.warned = False
        feed.trust.heard()
        if seq is None:
            feed.trust.on_malformed(None, now)
            return
        if feed.replaying:
            feed.hold(seq, batch, len(parts[2]))
            return
        yield from self._step(feed, seq, batch, now, budget, caught_up=caught_up)

    def _step(
        self,
        feed: Feed,
        seq: int,
        batch: EventBatch | None,
        now: float,
        budget: Budget,
        *,
        caught_up: bool | None = None,
    ) -> Steps[None]:
        """A batch in its order; `caught_up` None: it was held (not taken live)."""
        trust, before = feed.trust, feed.trust.distrust
        step = trust.on_batch(seq, now) if batch is not None else trust.on_malformed(seq, now)
        if batch is not None and caught_up is not None:
            trust.arrived(batch.ts, now, caught_up)
        if trust.distrust is not None and trust.distrust is not before:
            self._on_message(feed.pool.ref, trust.distrust.name.lower())
        if step is Step.RESET_AND_APPLY or step is Step.RESET_AND_REPLAY:
            feed.pool.forget(feed.slot)
        if step is Step.REPLAY or step is Step.RESET_AND_REPLAY:
            feed.replaying, feed.pending, feed.pending_bytes = True, deque([(seq, batch)]), 0
            until = seq if batch is not None else seq + 1
            feed.replay = asyncio.get_running_loop().create_task(
                self._replay(feed, trust.replay_from, until)
            )
            return
        if batch is not None and (yield from self._apply(feed, batch.events, now, budget)):
            feed.batches += 1
            self._on_message(feed.pool.ref, "applied")

    def _apply(
        self, feed: Feed, events: tuple[Event, ...], now: float, budget: Budget
    ) -> Steps[bool]:
        """Into the pool, unless they store blocks of another size than its own (the worker
        is then not trusted: `Distrust.BLOCK_SIZE`). In slices of at most a step's work,
        in order (`kvevents.steps`): a Pick between two sees the worker as after the batch's
        first events, as if the engine had published them as several batches."""
        size, step = feed.pool.block_size, budget.per_step
        for start in range(0, len(events), step):
            window = events[start : start + step]
            if any(isinstance(e, BlockStored) and e.block_size != size for e in window):
                if feed.trust.distrust is not Distrust.BLOCK_SIZE:
                    log.warning(
                        "kv events from %s: blocks of another size than %d", feed.endpoint, size
                    )
                    self._on_message(feed.pool.ref, "block_size")
                feed.trust.on_block_size(now)
                return False
            if budget.spend(len(window)):
                yield
        first = 0
        for i, event in enumerate(events):
            if budget.spend(cost(event)):
                feed.pool.apply(feed.slot, events[first : i + 1])
                first = i + 1
                yield
        if first < len(events) or not events:
            feed.pool.apply(feed.slot, events[first:])
        return True

    async def _replay(self, feed: Feed, start: int, until: int) -> None:
        """Ask for [start, until), apply what comes back in order, then the held batches
        (live ones keep being held until all are applied: they come after)."""
        async with self._replays:
            await self._replay_turn(feed, start, until)

    async def _replay_turn(self, feed: Feed, start: int, until: int) -> None:
        got: dict[int, bytes] = {}
        await self._fetch(feed, start, until, got)
        complete = all(seq in got for seq in range(start, until))
        now = self._clock()
        budget = Budget(REPLAY_WORK_PER_STEP)
        for seq in sorted(got):
            batch = await self._decoded(feed, got.pop(seq), budget)
            if batch is None:
                complete = False
            else:
                await finish_async(self._apply(feed, batch.events, now, budget))
        _, trigger = feed.pending.popleft()  # the batch that revealed the gap, if it decoded
        if isinstance(trigger, EventBatch):
            await finish_async(self._apply(feed, trigger.events, now, budget))
        feed.trust.replayed(complete, now)
        self._on_message(feed.pool.ref, "replayed" if complete else "replay_incomplete")
        await self._drain(feed, now, budget)

    async def _join(self, feed: Feed) -> None:
        """On subscribing: every batch the replay socket still buffers (vLLM's answers one
        from the seq asked for, here 0: its oldest), then the live ones held meanwhile that
        it did not hold (by seq), all in order through the worker's `WorkerTrust`: batch 0
        makes it trusted; an older buffer's first batch is a gap, as when joining without."""
        feed.trust.joining(self._clock())
        async with self._replays:
            await self._join_turn(feed)

    async def _join_turn(self, feed: Feed) -> None:
        got: dict[int, bytes] = {}
        complete = await self._fetch(feed, 0, None, got) is Outcome.COMPLETE
        budget = Budget(REPLAY_WORK_PER_STEP)
        if await self._restarted(feed, got, budget):  # the replay's are another process's
            log.warning("kv events from %s: engine restarted while joining", feed.endpoint)
            self._on_message(feed.pool.ref, "restarted")
            got.clear()
            complete = True
        elif not complete:
            self._on_message(feed.pool.ref, "replay_incomplete")
        feed.trust.joined(min(got, default=None), complete, self._clock())
        live = [(seq, batch) for seq, batch in feed.pending if seq not in got]
        feed.pending = deque([(seq, got[seq]) for seq in sorted(got)] + live)
        await self._drain(feed, self._clock(), budget)

    async def _restarted(self, feed: Feed, got: dict[int, bytes], budget: Budget) -> bool:
        """Whether a live batch held during the join differs from the replayed batch of its
        seq: one process publishes the same batch on both sockets, so the replay's batches
        are another process's (the engine restarted while joining)."""
        for seq, held in feed.pending:
            if isinstance(held, EventBatch) and seq in got:
                replayed = await self._decoded(feed, got[seq], budget)
                if replayed is not None and replayed != held:
                    return True
        return False

    async def _decoded(self, feed: Feed, held: Held, budget: Budget) -> EventBatch | None:
        """A held batch decoded (None: malformed, counted and logged)."""
        if not isinstance(held, bytes):
            return held
        try:
            return await finish_async(decode_steps(held, budget))
        except MalformedBatch as exc:
            log.warning("kv events replay from %s: %s", feed.endpoint, exc)
            self._on_message(feed.pool.ref, "malformed")
            return None

    async def _fetch(
        self, feed: Feed, start: int, until: int | None, got: dict[int, bytes]
    ) -> Outcome:
        """`replay.fetch`, in a replay's turn (`_replays`: 32 at once made turns 32 slices long)."""
        address, limits = feed.replay_address, self._limits
        if address is None:
            return Outcome.FAILED
        outcome = await fetch(self._context, address, start, until, got=got, limits=limits)
        if outcome is not Outcome.COMPLETE:
            log.warning("kv events replay from %s: %s", feed.endpoint, outcome.value)
        return outcome

    async def _drain(self, feed: Feed, now: float, budget: Budget) -> None:
        """The held batches, in order; the feed takes live ones again once they are done."""
        while feed.pending:
            seq, batch = feed.pending.popleft()
            batch = await self._decoded(feed, batch, budget)
            held = feed.pending
            await finish_async(self._step(feed, seq, batch, now, budget))
            if feed.pending is not held:  # it started another replay: the rest wait for it
                feed.pending.extend(held)
                return
        feed.replaying, feed.pending_bytes = False, 0

"""Every engine's KV events, read straight from its ZMQ PUB socket into the precise caches.

One SUB socket and one task per endpoint of the precise pools (ZMQ fans the stream out, as
Dynamo's router does), so a batch is attributed to the worker whose socket it came from;
it goes through that worker's `WorkerTrust` before its events reach the pool's index.
With a replay socket, missed batches are asked for, and on subscribing all it still
buffers, while the live batches wait (`kvevents.missed`). A feed stopped or replaced
stops its replay too.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

import zmq.asyncio

from kinference.kvevents.events import BlockStored, Event, EventBatch
from kinference.kvevents.feed import Feed
from kinference.kvevents.link import Backoff, Link, opened
from kinference.kvevents.missed import MissedBatches
from kinference.kvevents.replay import ReplayLimits
from kinference.kvevents.steps import Budget, Steps, cost, finish, finish_async
from kinference.kvevents.trust import Distrust, Step
from kinference.kvevents.wire import MalformedBatch, decode_seq, decode_steps
from kinference.tasks import cancel_and_wait

__all__ = ["EventSubscriber", "Feed"]  # Feed: where it long was

log = logging.getLogger(__name__)


class EventSubscriber(MissedBatches):
    """Runs the feeds (their replays and joins: `MissedBatches`); `on_message(pool_ref,
    outcome)` counts what happened to each message, `on_reopen(pool_ref)` each socket
    reopened (`kvevents.link`)."""

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

        def drain() -> None:  # messages dropped unread: a gap, from now (`trust.overflowed`)
            for seq in link.drain():
                self._on_message(feed.pool.ref, "overflow")
                if seq is None:  # as it would be taken: malformed
                    feed.trust.on_malformed(None, self._clock())
                else:
                    feed.trust.overflowed(seq)

        while (parts := await link.take()) is not None:
            drain()  # what waits in the socket taken off it, within its byte bound
            caught_up = link.caught_up()  # no message waits behind it
            await finish_async(self.steps(feed, parts, caught_up), between=drain)
            if not link.caught_up():
                # One batch per loop step: a backlog (a long prompt's steps, several
                # engines at once) is taken without waiting, and would hold Picks behind
                # it. Caught up, `take` waits for the next (the loop's turn).
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
        if _at_once(feed, events, budget):
            return True
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


def _at_once(feed: Feed, events: tuple[Event, ...], budget: Budget) -> bool:
    """`_apply` in one pass when its two would take no turn (an engine step's batch): the
    events of the pool's block size applied, their work spent as those passes spend it."""
    size = feed.pool.block_size
    if len(events) >= budget.per_step - budget.spent:  # more than one window, or a turn after
        return False
    if any(isinstance(e, BlockStored) and e.block_size != size for e in events):
        return False  # refused by the passes
    if not budget.spend_within(len(events) + sum(map(cost, events))):
        return False
    feed.pool.apply(feed.slot, events)
    return True

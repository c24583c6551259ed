"""What a feed missed, asked for again (`kvevents.replay`): after a gap, the missed batches;
on subscribing, all the engine's replay socket still buffers (a PUB socket drops what it
sent before). Live batches wait in order meanwhile (`Feed.hold`), those the replay also
brought dropped by seq (one differing from the replayed batch of its seq is a new
process's: the engine restarted during the join, and only the live batches count). A
replay is done once every missed batch came, or ends at one of its limits
(`replay.ReplayLimits`: what came is applied, the worker is a gap); at most `concurrency`
run at once.

A mixin of `EventSubscriber` (`kvevents.subscriber`), which takes the live batches and
applies every batch through the worker's trust (`_step`, `_apply`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import zmq.asyncio

from kinference.kvevents.events import Event, EventBatch
from kinference.kvevents.feed import Feed, Held
from kinference.kvevents.replay import REPLAY_WORK_PER_STEP, Outcome, ReplayLimits, fetch
from kinference.kvevents.steps import Budget, Steps, finish_async
from kinference.kvevents.wire import MalformedBatch, decode_steps

log = logging.getLogger("kinference.kvevents.subscriber")  # the feeds' log, as before


class MissedBatches:
    """Replays and joins (the subscriber's state is `EventSubscriber`'s)."""

    _context: zmq.asyncio.Context
    _limits: ReplayLimits
    _replays: asyncio.Semaphore  # replays under way at once (`ReplayLimits.concurrency`)
    _clock: Callable[[], float]
    _on_message: Callable[[str, str], None]

    if TYPE_CHECKING:  # `EventSubscriber`'s

        def _step(
            self, feed: Feed, seq: int, batch: EventBatch | None, now: float, budget: Budget,
            *, caught_up: bool | None = None,
        ) -> Steps[None]: ...  # fmt: skip

        def _apply(
            self, feed: Feed, events: tuple[Event, ...], now: float, budget: Budget
        ) -> Steps[bool]: ...

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

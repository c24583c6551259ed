"""A precise pool's lazily tokenized prompts (`PromptBlocks.ticket`): a Pick routes on the
blocks tokenized by then and the rest of the prompt is tokenized after it (`tokenize.lazy`).
Those remaining blocks are pending on the worker the prompt went to once they are named,
and the queued request's prompt is named to the end (`kvcache.queue`); the worker and the
rest may become known in either order. Each map is bounded by `MAX_TICKETS` (the oldest
entries go first).

A mixin of `PoolCaches` (`kvcache.pool`): the maps are its fields.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kinference.kvcache.blocks import BlockId
from kinference.kvcache.queue import EngineQueue
from kinference.kvevents.trust import WorkerTrust

MAX_TICKETS = 256  # lazily tokenized prompts whose remaining blocks are awaited, per pool


class LazyPrompts:
    """The rests of lazily tokenized prompts (the maps are `PoolCaches`'s fields)."""

    claims: OrderedDict[int, int]  # ticket -> the slot it went to, its rest not named yet
    rests: OrderedDict[int, tuple[BlockId, ...]]  # ticket -> its rest, its slot not known
    tickets: dict[int, tuple[int, int]]  # ticket -> slot, queue key of its request
    trust: dict[int, WorkerTrust]
    queues: dict[int, EngineQueue]

    if TYPE_CHECKING:  # `PoolCaches.expect`

        def expect(
            self, slot: int, blocks: Sequence[BlockId], now: float, key: int | None = None
        ) -> None: ...

    def ticketed(self, ticket: int, slot: int, key: int) -> None:
        """A request whose prompt is tokenized lazily joined `slot`'s queue as `key`."""
        self.tickets[ticket] = (slot, key)
        if len(self.tickets) > MAX_TICKETS:
            self.tickets.pop(next(iter(self.tickets)))

    def claim(self, ticket: int, slot: int, now: float) -> None:
        """A lazily tokenized prompt went to `slot`: its remaining blocks are pending there
        once they are named."""
        rest = self.rests.pop(ticket, None)
        if rest is not None:
            self.expect(slot, rest, now, self._named(ticket, rest))
            return
        self.claims[ticket] = slot
        if len(self.claims) > MAX_TICKETS:
            self.claims.popitem(last=False)

    def complete(self, ticket: int, blocks: tuple[BlockId, ...], now: float) -> None:
        """The rest of a lazily tokenized prompt: pending where it went (once it is known)."""
        slot = self.claims.pop(ticket, None)
        if slot is not None:
            key = self._named(ticket, blocks)
            if slot in self.trust:
                self.expect(slot, blocks, now, key)
            return
        self.rests[ticket] = blocks
        if len(self.rests) > MAX_TICKETS:
            self.rests.popitem(last=False)

    def unclaim(self, slot: int) -> None:
        """`slot`'s worker is forgotten (it left, or started over): the rests still due to
        it are expected nowhere, not on the next worker to take the slot (`routing.slots`
        reuses a freed one)."""
        for ticket in [t for t, claimed in self.claims.items() if claimed == slot]:
            del self.claims[ticket]
        for ticket in [t for t, (queued, _) in self.tickets.items() if queued == slot]:
            del self.tickets[ticket]

    def _named(self, ticket: int, blocks: tuple[BlockId, ...]) -> int | None:
        """The queued request's prompt, now named to the end; its key (None: not known)."""
        queued = self.tickets.pop(ticket, None)
        if queued is None:
            return None
        if (queue := self.queues.get(queued[0])) is not None:
            queue.named(queued[1], blocks)
        return queued[1]

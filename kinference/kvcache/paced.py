"""Work handed to the event loop in bursts, applied a time budget per loop iteration.

A lazily tokenized prompt's rest arrives from the tokenizer thread (`call_soon_threadsafe`);
for a 1 MiB prompt applying it costs the loop 3-4 ms (`PoolCaches.complete` → `expect`).
When many concurrent prompts finish together, asyncio would run all those callbacks in
one loop iteration, before it polls I/O or runs a timer: tens of ms in which no Pick is
answered. `Paced` queues such items and applies them in order, as many per iteration as
fit in `budget` seconds (at least one), then lets the loop go round before the next ones.

An item applied an iteration later is the same as one whose thread was that much slower.
Outside a running loop (synchronous callers) an item is applied at once. The queue is
bounded (`limit`, oldest dropped, as an evicted ticket is); when the loop stops, what is
still queued is never applied (nothing awaits it: no task to cancel). An item whose
`apply` raises goes to the loop's exception handler; the ones after it are still applied.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

BUDGET = 0.002  # s of loop time per iteration spent applying queued items (≥ 1 item)


class Paced(Generic[T]):
    """Items for `apply`, applied on the running loop a `budget` per loop iteration."""

    def __init__(self, apply: Callable[[T], None], limit: int, budget: float = BUDGET) -> None:
        self._apply = apply
        self._limit = limit
        self._budget = budget
        self._queue: deque[T] = deque()
        self._scheduled: asyncio.AbstractEventLoop | None = None  # the loop a drain waits on

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, item: T) -> None:
        """Queue `item` (on the loop), or apply it now when no loop runs."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._apply(item)
            return
        self._queue.append(item)
        if len(self._queue) > self._limit:
            self._queue.popleft()
        if self._scheduled is not loop:  # none waiting (or on a loop since stopped)
            self._scheduled = loop
            loop.call_soon(self._drain, loop)

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """Apply queued items for up to the budget; the rest on the next iteration (a
        callback scheduled now runs after the loop has polled I/O and run due timers)."""
        end = time.perf_counter() + self._budget
        try:
            while self._queue:
                self._apply(self._queue.popleft())
                if time.perf_counter() >= end:
                    break
        finally:  # an item that raised is the loop's to report (as its own callback was)
            if self._queue:
                loop.call_soon(self._drain, loop)
            else:
                self._scheduled = None

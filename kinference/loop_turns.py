"""Turns on the event loop for steps that hold it for milliseconds: one such step per loop
iteration.

A Pick's heavy steps run on the loop when that is cheaper than a hand-off (a big body's
parse, the start of its prompt's tokenization, the decision: ~1-3 ms each). Sixteen Picks
whose bodies arrive together would run sixteen of them back to back in one iteration of the
loop, and everything else waiting on it (other calls' I/O, timers, the engines' KV events)
would wait ~40 ms. Each such step first takes a turn: the first step of an iteration runs
at once, the others wait in order, and each next one starts in a later iteration, after
the callbacks that became ready meanwhile. The steps take as long as before; the loop's
longest wait is one step, not all of them.
"""

from __future__ import annotations

import asyncio
import collections


class LoopTurns:
    """Hands the loop to one heavy step per iteration (FIFO)."""

    def __init__(self) -> None:
        self._taken = False  # a step ran (or runs) in this iteration
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def turn(self) -> None:
        """Returns when the caller may run its step (synchronously, right away)."""
        loop = asyncio.get_running_loop()
        if self._taken:
            future: asyncio.Future[None] = loop.create_future()
            self._waiting.append(future)
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():
                    self._next()  # handed the turn while being cancelled: pass it on
                raise
        else:
            self._taken = True
        loop.call_soon(self._next)  # the turn passes on in the next iteration

    def _next(self) -> None:
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_result(None)  # its step is the next iteration's
                return
        self._taken = False

"""One thread for the CPU-heavy part of handling a body: scanning chunks, parsing at Pick.

The event loop must never be held for long (a held loop stops every call of the replica,
and the other replicas count it dead once its heartbeat lapses), but a hostile body can make
the JSON scanner or the parse take seconds. Such work runs here instead: a single thread, so
at most one heavy body is worked on at a time (its memory bounded with it) and the loop
competes with one thread only for the GIL, which the interpreter hands over every switch
interval (`requests/decode.py` keeps the C decoder from holding it for long). Small bodies
and chunks stay on the loop: a thread hop costs more than their whole work.

The cyclic garbage collector is paused while the thread works: a hostile parse allocates
millions of objects, which triggers full collections (~50 ms each, GIL held, loop stopped)
for objects that reference counting frees anyway when the parse ends.

The switch interval is left at Python's 5 ms: lowering it to 0.5 ms while the thread worked
cut the loop's p50/p99 lag beside a parse (9 -> 0.2 ms, 20 -> 6 ms) but in a test with
uploads scanned in the thread beside gRPC's own threads the loop once stalled 4.3 s (329 ms
at 5 ms, same machine): not shipped until that is understood (docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from kinference.bodies import ByteBudget
from kinference.errors import ResourceExhausted

T = TypeVar("T")

# Bodies up to this size (bytes) are parsed on the loop at Pick: even the densest JSON of
# this size costs a few milliseconds, and a thread hop would cost ordinary requests latency.
INLINE_PARSE_BYTES = 32 * 1024
# Chunk bytes scanned on the loop at once; more go to the thread (dense JSON scans at ~1 ms
# per KiB in Python).
INLINE_SCAN_BYTES = 4 * 1024


class Offload:
    """The parse thread, started at first use; `close` stops it."""

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._charged_turn = asyncio.Lock()  # one charged work reserves at a time

    def submit(self, work: Callable[[], T]) -> Future[T]:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="kinference-parse")
        return self._executor.submit(_working, work)

    async def run(self, work: Callable[[], T]) -> T:
        """`work()` in the thread; a cancelled caller stops waiting, the work still ends."""
        return await asyncio.wrap_future(self.submit(work))

    async def run_charged(
        self,
        budget: ByteBudget,
        cost: Callable[[], int],
        work: Callable[[], T],
        *,
        abandoned: Callable[[], None],
    ) -> T:
        """`cost()`, then `work()` with that many bytes reserved from `budget` until it ends.

        Both run in the thread; charged works take turns, so the bytes reserved are those of
        the one parse under way, not of every parse waiting for the thread. Raises
        ResourceExhausted when the budget cannot hold the cost. If this does not return
        normally, `abandoned()` runs on the loop once the thread no longer uses the inputs.
        """
        loop = asyncio.get_running_loop()
        pending: Future[Any] | None = None
        try:
            async with self._charged_turn:
                pending = self.submit(cost)
                nbytes = await asyncio.wrap_future(pending)
                _reserve(budget, nbytes)
                pending = self.submit(work)
                pending.add_done_callback(lambda _: _soon(loop, budget.release, nbytes))
            result: T = await asyncio.wrap_future(pending)
        except BaseException:
            if pending is not None and not pending.done():  # the thread still reads them
                pending.add_done_callback(lambda _: _soon(loop, abandoned))
            else:
                abandoned()
            raise
        return result

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


def _reserve(budget: ByteBudget, nbytes: int) -> None:
    try:
        budget.reserve(nbytes)
    except ResourceExhausted:
        raise ResourceExhausted(
            f"parsing this body needs ~{nbytes} bytes of the server-wide body budget, "
            f"which holds {budget.used} of {budget.limit}"
        ) from None


def _soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
    """Run `callback(*args)` on the loop from the thread (dropped if the loop has closed)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


def _working(work: Callable[[], T]) -> T:
    """Run `work` with the cyclic collector paused (only this thread pauses it)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return work()
    finally:
        if was_enabled:
            gc.enable()

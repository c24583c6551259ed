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
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

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

    def submit(self, work: Callable[[], T]) -> Future[T]:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="kinference-parse")
        return self._executor.submit(_without_gc, work)

    async def run(self, work: Callable[[], T]) -> T:
        """`work()` in the thread; a cancelled caller stops waiting, the work still ends."""
        return await asyncio.wrap_future(self.submit(work))

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


def _without_gc(work: Callable[[], T]) -> T:
    """Run `work` with the cyclic collector paused (only this thread pauses it)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return work()
    finally:
        if was_enabled:
            gc.enable()

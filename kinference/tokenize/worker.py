"""The tokenizer thread: Picks' work first, finishing tokenizations in between.

One thread owns every tokenizer and its caches, so they need no locks. Work a Pick waits for
(`submit`) runs before work that only prepares later Picks (`later`: the rest of a prompt
tokenized lazily), which runs in short slices (it re-queues itself) so that a Pick never
waits behind more than one slice. Background slices also wait while a Pick is being decided
(`picking` .. `picked`: its tokens handed back, then routed on the loop), since their
Python steps hold the GIL the event loop needs then, and `SETTLE_S` after (the loop sends
the Pick's request on to its engine); but not for longer than `max_pause_s`, so that under
a steady stream of Picks the next turns still find their pieces tokenized.

Small Pick work runs on the caller's thread instead (`here`), when the thread is idle and
no Pick waits: a hand-off there and back costs ~1 ms of GIL switches, more than a cold
prompt's first piece. The thread holds `_busy` while it runs anything, so work done here
never overlaps its own: its tokenizers and caches still need no locks. A background slice
under way is waited for, up to `here_wait_s` (the caller's thread lets go of the GIL
while it waits, so the slice runs at full speed): under a steady stream of Picks the thread
is nearly always finishing an earlier prompt, and without the wait every Pick paid the
hand-off.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_LATER = 256  # background slices queued; more are dropped (only later Picks lose)
MAX_PAUSE_S = 0.05  # background work waits for Picks being decided at most this long
# ... and this long after the last one was (wall clock): the loop sends its request on then.
SETTLE_S = 0.003
HERE_WAIT_S = 0.002  # `here` waits this long at most for a background slice to end


class TokenizerThread:
    def __init__(
        self,
        name: str = "kinference-tokenize",
        max_pause_s: float = MAX_PAUSE_S,
        clock: Callable[[], float] = time.monotonic,
        here_wait_s: float = HERE_WAIT_S,
    ) -> None:
        self._urgent: collections.deque[Callable[[], None]] = collections.deque()
        self._later: collections.deque[Callable[[], None]] = collections.deque()
        self._ready = threading.Condition()
        self._closed = False
        self._picks = 0  # Picks between `picking` and `picked`
        self._max_pause_s = max_pause_s
        self._clock = clock
        self._held_since: float | None = None  # background work held back by Picks since
        self._picked_at = -SETTLE_S  # `time.monotonic()` at the last `picked`
        self._busy = threading.Lock()  # held by whoever runs work (the thread, or `here`)
        self._background = False  # what the thread runs (or ran last) is background work
        self._here_wait_s = here_wait_s
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def waiting(self) -> int:
        """Pick work submitted and not started."""
        return len(self._urgent)

    def current(self) -> bool:
        """Whether the caller runs on this thread (not `here`, on the caller's own)."""
        return threading.get_ident() == self._thread.ident

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing running (a waiter may wake before the thread lets go
        of `_busy` after the work it waited for)."""
        return not self._urgent and not self._later and not self._busy.locked()

    def submit(self, work: Callable[[], T]) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(work())
            except BaseException as exc:  # handed to the waiter
                future.set_exception(exc)

        self._put(self._urgent, run)
        return future

    def here(self, work: Callable[[], T]) -> tuple[T] | None:
        """Run `work` now on the caller's thread, if the thread is idle (or ends its
        background slice within `here_wait_s`) and no Pick work waits; None if not (then
        `submit` it). Exceptions reach the caller."""
        if self._urgent or self._closed:
            return None
        if not self._busy.acquire(blocking=False) and not (
            self._background and self._busy.acquire(timeout=self._here_wait_s)
        ):
            return None
        try:
            return (work(),)
        finally:
            self._busy.release()

    def later(self, work: Callable[[], None]) -> bool:
        """Queue background work; False if too much is queued already, or the thread is
        closed (dropped)."""
        with self._ready:
            if len(self._later) >= MAX_LATER or self._closed:
                return False
            self._later.append(work)
            if not self._picks:  # else `picked` wakes the thread: no wake-up to wait again
                self._ready.notify()
        return True

    def picking(self) -> None:
        """A Pick is under way: background work waits (see the module's docstring)."""
        with self._ready:
            self._picks += 1

    def picked(self) -> None:
        with self._ready:
            self._picks = max(self._picks - 1, 0)
            self._picked_at = time.monotonic()
            self._ready.notify()

    def _put(self, queue: collections.deque[Callable[[], None]], work: Callable[[], None]) -> None:
        with self._ready:
            if self._closed:
                raise RuntimeError("tokenizer thread closed")
            queue.append(work)
            self._ready.notify()

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._urgent.clear()
            self._later.clear()
            self._ready.notify()

    def _run(self) -> None:
        while True:
            with self._ready:
                work = self._next()
                if work is None:
                    return
            try:
                with self._busy:
                    work()
            except Exception:  # background work has no waiter: log, keep the thread
                log.exception("background tokenizer work failed")

    def _next(self) -> Callable[[], None] | None:
        """The next work to run (None: closed); called holding the condition."""
        while not self._closed:
            if self._urgent:
                self._background = False
                return self._urgent.popleft()
            if not self._later:
                self._held_since = None
                self._ready.wait()
                continue
            now = self._clock()
            if self._held_since is None:
                self._held_since = now
            wait = self._held_since + self._max_pause_s - now
            settle = 0.0 if self._picks else self._picked_at + SETTLE_S - time.monotonic()
            if (self._picks == 0 and settle <= 0) or wait <= 0:
                self._held_since = None  # a held-back slice runs; the pause starts again
                self._background = True
                return self._later.popleft()
            self._ready.wait(min(wait, settle) if self._picks == 0 else wait)
        return None

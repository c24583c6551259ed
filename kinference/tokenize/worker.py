"""The tokenizer thread: Picks' work first, finishing tokenizations in between.

One thread owns every tokenizer and its caches, so they need no locks. Work a Pick waits for
(`submit`) runs before work that only prepares later Picks (`later`: the rest of a prompt
tokenized lazily), which runs in short slices (it re-queues itself) so that a Pick never
waits behind more than one slice.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_LATER = 256  # background slices queued; more are dropped (only later Picks lose)


class TokenizerThread:
    def __init__(self, name: str = "kinference-tokenize") -> None:
        self._urgent: collections.deque[Callable[[], None]] = collections.deque()
        self._later: collections.deque[Callable[[], None]] = collections.deque()
        self._ready = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def waiting(self) -> int:
        """Pick work submitted and not started."""
        return len(self._urgent)

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

    def later(self, work: Callable[[], None]) -> bool:
        """Queue background work; False if too much is queued already, or the thread is
        closed (dropped)."""
        with self._ready:
            if len(self._later) >= MAX_LATER or self._closed:
                return False
            self._later.append(work)
            self._ready.notify()
        return True

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
                while not (self._urgent or self._later or self._closed):
                    self._ready.wait()
                if self._closed:
                    return
                work = self._urgent.popleft() if self._urgent else self._later.popleft()
            try:
                work()
            except Exception:  # background work has no waiter: log, keep the thread
                log.exception("background tokenizer work failed")

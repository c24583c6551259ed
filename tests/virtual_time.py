"""An event loop on virtual time, for code that times itself with `asyncio.sleep` and
`loop.time()`: when nothing is ready, the clock jumps to the next timer instead of waiting.

    assert run_virtual(main()) == ...   # main() may sleep for hours; it returns at once

Times measured inside are exact model times, the same on a loaded machine as on an idle
one, so tests can assert them. Only timers and plain callbacks: real I/O still happens, but
a wait for I/O alone (no timer due) is a test bug and raises.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _Selector(selectors.DefaultSelector):
    """Polls without blocking; a wait of `timeout` seconds moves the clock on instead."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise RuntimeError("virtual time: every task waits and no timer is due")
        self.now += timeout
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._virtual = _Selector()
        super().__init__(self._virtual)

    def time(self) -> float:
        return self._virtual.now


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main)

"""A PushBody's inter-chunk budget as one timer per upload, moved lazily.

Restarting a timer at every chunk costs a cancel and a new timer each (`Timeout.reschedule`);
here a chunk only notes the time, and the timer, when it fires, looks whether body bytes
came since it was set: if so it is set again for the budget after the last of them, else
the budget is spent and the upload's `asyncio.timeout` expires. It ends at the same time
(the budget after the last body bytes) as a timer restarted per chunk would.

Only the caller's idle time counts: while the picker works on what it read (`pause` to
`resume`: a chunk's scan waiting for the parse worker), it reads nothing, so the caller's
next bytes wait on the picker, not the other way round.
"""

from __future__ import annotations

import asyncio


class IdleWatch:
    """The budget of one upload, inside `timeout` (an `asyncio.timeout(None)` entered by
    the upload's task); `progress()` at every chunk of body bytes, `stop()` at the end."""

    __slots__ = ("_handle", "_idle_s", "_loop", "_paused", "_timeout", "last")

    def __init__(self, timeout: asyncio.Timeout, idle_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._timeout = timeout
        self._idle_s = idle_s
        self.last = self._loop.time()  # when body bytes came last (or the upload began)
        self._paused = False
        self._handle = self._loop.call_at(self.last + idle_s, self._check, self.last)

    def progress(self) -> None:
        """Body bytes came now: the budget starts again."""
        self.last = self._loop.time()

    def pause(self) -> None:
        """The picker works on what it read: no time counts against the caller until
        `resume`."""
        self._paused = True

    def resume(self) -> None:
        """The picker reads again: the budget starts again from now."""
        self._paused = False
        self.last = self._loop.time()

    def stop(self) -> None:
        self._handle.cancel()

    def _check(self, armed_from: float) -> None:
        now = self._loop.time()
        if self._paused:  # the picker's own time: look again a budget after now
            self._handle = self._loop.call_at(now + self._idle_s, self._check, self.last)
        elif self.last == armed_from:  # nothing since the timer was set: the budget is spent
            self._timeout.reschedule(now)  # expires now: cancels the task
        else:
            self._handle = self._loop.call_at(self.last + self._idle_s, self._check, self.last)

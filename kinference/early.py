"""A pushed body's parse and tokenization, begun as soon as the body is complete.

A Pick always follows its PushBody, and what it waits for in precise prefix mode (the
parse, the chat template, the prompt's first tokens and the check of who holds them) needs
the body only, not the Pick's call: so `PickerService.commit_push` starts it as a task, and
the Pick finds it done or under way (the gap between the two calls, a round trip to the
caller, is work the loop does instead of waiting). Bounded like the Pick's own work: only
bodies whose parse runs on the loop (`requests/loop_cost.py`), at most one task per body
waiting for its Pick (the body budget bounds those), the tokenizer's own queue bound and
timeout; a body dropped before its Pick (TTL) has its task cancelled and its reservation
returned (`drop`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from kinference.bodies import ByteBudget
from kinference.kvcache.precise import PreciseQuery
from kinference.requests import InferenceRequest

Prepared = tuple[InferenceRequest | str, PreciseQuery | None]


@dataclass(slots=True)
class Early:
    """One body's work begun at push: its task and the bytes reserved for its parse."""

    task: asyncio.Task[Prepared]
    held: int


class EarlyStarts:
    """Work begun at push, by stream id, until its Pick takes it or its body is dropped."""

    def __init__(self, budget: ByteBudget) -> None:
        self._budget = budget
        self._started: dict[int, Early] = {}

    def __len__(self) -> int:
        return len(self._started)

    def begin(
        self, stream_id: int, held: int, work: Callable[[], Coroutine[Any, Any, Prepared]]
    ) -> bool:
        """Run `work` for the body of `stream_id` (whose parse holds `held` bytes of the
        budget, reserved by the caller and returned by this from now on); False (nothing
        started, nothing taken over) when no event loop runs here."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        self._started[stream_id] = Early(loop.create_task(work()), held)
        return True

    def take(self, stream_id: int) -> Early | None:
        """The work begun for `stream_id`, now the Pick's (its `held` bytes with it)."""
        return self._started.pop(stream_id, None)

    def drop(self, gone: Callable[[int], bool]) -> None:
        """Cancel the work of bodies that are `gone` (expired before their Pick)."""
        for stream_id in [s for s in self._started if gone(s)]:
            self.cancel(stream_id)

    def cancel(self, stream_id: int) -> None:
        """Cancel the work begun for `stream_id`, if any (its Pick does without it)."""
        early = self._started.pop(stream_id, None)
        if early is not None:
            early.task.cancel()
            self._budget.release(early.held)

"""How an engine's prompts get prefilled: in turn, in steps of a token budget (the default,
as vLLM and SGLang do), or each on its own beside the others (the simulator's old way).

`PrefillLane` (in turn) follows vLLM v1's `Scheduler.schedule`: every step has a budget of
`max_num_batched_tokens`; prompts already being prefilled take it first, then waiting ones,
first come first served, each in chunks of what is left. So a prompt's first token comes
once the uncached tokens of every prompt ahead of it and its own have been computed, and
prompts admitted together finish one after another. A step of `t` prompt tokens costs
`EngineModel.prefill_s(t)` (one fixed step cost plus `t` tokens at the prefill rate, one
jitter draw). Every prompt computes at least one token, as vLLM recomputes the last one.

A step that carries prefill tokens also carries every running decode's next token (a mixed
step), and costs them its prefill tokens: the lane adds `t * prefill_s_per_token` to
`stalled_s` as each step ends, and each decoding job delays its next token by what
`stalled_s` grew since it last looked. Over a long prefill the running decodes are held
back about as long as it lasts, as in vLLM with chunked prefill. Decodes take no share of
the budget here (one token each: a few per cent of it at most).

`SideBySide` sleeps each prompt's own `prefill_s(uncached)`: any number prefill at once,
each as fast as one alone, and decodes are never slowed. Kept for comparison with figures
measured before the lane existed.

A job whose client goes away while it waits leaves the lane at once; a step already under
way finishes for the others in it. The lane runs one step task while it has work and none
when idle, so an engine left alone holds no task.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from loadtest.engine_model import EngineModel

# vLLM's default for the OpenAI server on a GPU of >= 70 GiB other than an A100 (H100,
# MI300x); 2048 on smaller ones (`EngineArgs` batch defaults, v1).
DEFAULT_BATCHED_TOKENS = 8192


class Prefill(Protocol):
    """Waits out one prompt's prefill; tells decodes how long mixed steps held them."""

    stalled_s: float  # wall seconds of prefill carried by steps so far; only grows

    async def prefill(self, uncached_tokens: int) -> None: ...


class SideBySide:
    """Every prompt prefills on its own, at full speed, however many run at once."""

    def __init__(self, engine: EngineModel, *, time_scale: float) -> None:
        self._engine = engine
        self._time_scale = time_scale
        self.stalled_s = 0.0

    async def prefill(self, uncached_tokens: int) -> None:
        await asyncio.sleep(self._engine.prefill_s(uncached_tokens) * self._time_scale)


@dataclass(eq=False, slots=True)
class _Prompt:
    left: int  # tokens still to compute
    done: asyncio.Future[None]


class PrefillLane:
    """One engine's prompts, prefilled first come first served in budgeted steps."""

    def __init__(self, engine: EngineModel, *, budget_tokens: int, time_scale: float) -> None:
        if budget_tokens < 1:
            raise ValueError("budget_tokens must be >= 1")
        self._engine = engine
        self._budget = budget_tokens
        self._time_scale = time_scale
        self._queue: deque[_Prompt] = deque()
        self._stepper: asyncio.Task[None] | None = None
        self.stalled_s = 0.0
        self.steps = 0  # steps run to their end

    @property
    def queued(self) -> int:
        """Prompts being prefilled or waiting to be."""
        return len(self._queue)

    async def prefill(self, uncached_tokens: int) -> None:
        prompt = _Prompt(max(uncached_tokens, 1), asyncio.get_running_loop().create_future())
        self._queue.append(prompt)
        if self._stepper is None:
            self._stepper = asyncio.create_task(self._run())
        try:
            await prompt.done
        except asyncio.CancelledError:
            self._leave(prompt)
            raise

    def _leave(self, prompt: _Prompt) -> None:
        with contextlib.suppress(ValueError):  # already done: the step ended as it left
            self._queue.remove(prompt)
        if not self._queue and self._stepper is not None:
            self._stepper.cancel()  # nothing left to compute: drop the step under way
            self._stepper = None

    async def _run(self) -> None:
        while self._queue:
            step = self._plan()
            tokens = sum(count for _, count in step)
            await asyncio.sleep(self._engine.prefill_s(tokens) * self._time_scale)
            self.steps += 1
            self.stalled_s += tokens * self._engine.timing.prefill_s_per_token * self._time_scale
            for prompt, count in step:
                prompt.left -= count
                if prompt.left == 0 and not prompt.done.done():
                    self._queue.remove(prompt)
                    prompt.done.set_result(None)
        self._stepper = None

    def _plan(self) -> list[tuple[_Prompt, int]]:
        """The next step: chunks of the queued prompts, in order, up to the budget."""
        step: list[tuple[_Prompt, int]] = []
        room = self._budget
        for prompt in self._queue:
            if room == 0:
                break
            count = min(prompt.left, room)
            step.append((prompt, count))
            room -= count
        return step

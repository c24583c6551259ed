"""The engine's scheduler: a running batch of at most `max_num_seqs`, a FIFO waiting queue,
prefill and decode timed by the cost model, on the event loop.

A job is scheduled when a batch slot frees; then its prompt meets the prefix cache
(`EngineModel.admit`), its uncached tokens are prefilled (`prefill.py`: by default in turn
with every other prompt on this engine, in steps of a token budget, as vLLM does), and it
decodes. Each decode gap is the model's gap for the batch running at that moment, so tokens
slow down as the batch grows, and a prefill step running beside the decodes delays each of
them by that step's prompt tokens (a mixed step). Times are model seconds times
`time_scale`.

Decoding does not sleep once per token: it sleeps until a token is due and hands over
every token due within `stream_step_s` of it in one step, and a step that wakes late
(a busy machine) hands over all tokens overdue by then. Total decode time stays right at
any load or timer resolution, and the event loop wakes at most about once per step.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter, deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Protocol

from loadtest.engine_model import Admission, EngineModel
from loadtest.sim_engine.prefill import Prefill


@dataclass(slots=True)
class Job:
    """One request's generation: its prompt, the text it will produce, what it found."""

    model: str
    prompt: str
    completion: str  # the whole generated text, known up front
    tokens: int  # completion tokens
    arrived_at: float  # loop clock, seconds
    finish_reason: str = "length"  # "length": the request's max_tokens; "stop": our default
    admission: Admission | None = None  # set once scheduled


class Observer(Protocol):
    """Told what happens to jobs (the engine's metrics)."""

    def scheduled(self, job: Job) -> None: ...
    def first_token(self, job: Job, ttft_s: float) -> None: ...
    def decoded(self, job: Job, gap_s: float, tokens: int) -> None: ...
    def finished(self, job: Job) -> None: ...


class Scheduler:
    """Batch slots, the waiting queue and the timing of every job of one engine."""

    def __init__(
        self,
        engine: EngineModel,
        observer: Observer,
        prefill: Prefill,
        *,
        max_num_seqs: int,
        time_scale: float,
        stream_step_s: float,
        clock: Callable[[], float],
    ) -> None:
        self.engine = engine
        self._observer = observer
        self._prefill = prefill
        self._max_num_seqs = max_num_seqs
        self._time_scale = time_scale
        self._stream_step_s = stream_step_s
        self._clock = clock
        self._queue: deque[tuple[asyncio.Future[None], str]] = deque()
        self._running: Counter[str] = Counter()  # by model name
        self._waiting: Counter[str] = Counter()
        self._used_blocks = 0  # KV blocks held by running jobs

    @property
    def running(self) -> int:
        return self.engine.running

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def running_for(self, model: str) -> int:
        return self._running[model]

    def waiting_for(self, model: str) -> int:
        return self._waiting[model]

    @property
    def kv_usage(self) -> float:
        """Fraction of the cache's blocks that running jobs hold (prompt and completion)."""
        return min(self._used_blocks / self.engine.capacity_blocks, 1.0)

    async def generate(self, job: Job) -> AsyncGenerator[int, None]:
        """Run `job`; yields the number of tokens of each step, the first one alone."""
        await self._acquire(job.model)
        blocks = math.ceil((len(job.prompt) + len(job.completion)) / self.engine.block_chars)
        self._used_blocks += blocks
        try:
            job.admission = self.engine.admit(job.prompt, job.completion)
            self._observer.scheduled(job)
            await self._prefill.prefill(job.admission.uncached_tokens)
            self._observer.first_token(job, self._clock() - job.arrived_at)
            yield 1
            async for count in self._decode(job):
                yield count
            self._observer.finished(job)
        finally:
            self._used_blocks -= blocks
            self._release(job.model)

    async def _decode(self, job: Job) -> AsyncGenerator[int, None]:
        remaining = job.tokens - 1
        factor = self.engine.jitter_factor() * self._time_scale  # one draw per job
        due = self._clock()
        stalled = self._prefill.stalled_s
        while remaining:
            gap = self.engine.decode_gap_s() * factor  # the batch as it is now
            held = self._prefill.stalled_s - stalled  # by prefill steps since the last look
            stalled += held
            due += gap + held
            count = 1
            horizon = max(self._clock(), due) + self._stream_step_s
            while count < remaining and due + gap <= horizon:
                due += gap
                count += 1
            await asyncio.sleep(max(due - self._clock(), 0.0))
            self._observe(job, gap, held, count)
            remaining -= count
            yield count

    def _observe(self, job: Job, gap: float, held: float, count: int) -> None:
        """The step's gaps: the first token's held back by the prefill, the rest not."""
        if held:
            self._observer.decoded(job, gap + held, 1)
            count -= 1
        if count:
            self._observer.decoded(job, gap, count)

    async def _acquire(self, model: str) -> None:
        if self.engine.running < self._max_num_seqs and not self._queue:
            self._start(model)
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (granted, model)
        self._queue.append(entry)
        self._waiting[model] += 1
        try:
            await granted
        except asyncio.CancelledError:
            if not granted.cancelled():
                self._release(model)  # the slot came just as the caller gave up
            elif entry in self._queue:  # else `_release` took it off, giving it nothing
                self._queue.remove(entry)
                self._waiting[model] -= 1
            raise

    def _start(self, model: str) -> None:
        self.engine.running += 1
        self._running[model] += 1

    def _release(self, model: str) -> None:
        self.engine.running -= 1
        self._running[model] -= 1
        while self._queue and self.engine.running < self._max_num_seqs:
            granted, waiting_model = self._queue.popleft()
            self._waiting[waiting_model] -= 1
            if granted.cancelled():  # its task was cancelled (the client went away) and
                continue  # has not run yet: no slot for it (before, one leaked for ever)
            self._start(waiting_model)
            granted.set_result(None)

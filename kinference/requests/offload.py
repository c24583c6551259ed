"""The CPU-heavy part of handling a body, kept off the event loop: scanning dense chunks,
parsing big bodies at Pick.

The event loop must never be held for long (a held loop stops every call of the replica,
and the other replicas count it dead once its heartbeat lapses), but a hostile body can make
the JSON scanner or the parse take seconds. A thread does not help enough: CPython lets the
loop back in only every switch interval (5 ms), so the loop lagged ~9 ms p50 and ~25 ms at
worst beside hostile parses (docs/reliability.md). So that work runs in a worker *process*
(`requests/worker.py`), one job at a time, started at first use:

- a chunk is scanned on the loop for `LOOP_SCAN_S` (a chunk of base64 or prose is done in
  a few events); the rest of a dense chunk is sent to the worker with the scanner,
  which comes back having scanned it (`JsonScanner.adopt`);
- a body over `INLINE_PARSE_BYTES` is parsed in the worker: its bytes go over a pipe a MiB
  per loop step, but not the inside of long strings the parse never reads
  (`shipping.py`); the bytes shipped, and then the parse's peak memory as the worker
  estimates it, are reserved from the server-wide body budget until the job ends
  (RESOURCE_EXHAUSTED when they cannot be); only the job under way holds a reservation,
  not those waiting their turn. The worker returns the request trimmed to a small size.

A job runs as a task of its own: a caller that goes away stops waiting, the job still ends
(its budget is released then). A job over its deadline (`job_deadline_s`) kills the
worker; a dead worker fails its job with UNAVAILABLE, and the next job starts a new one. A
worker whose resident memory passed `RECYCLE_RSS_BYTES` after a job is replaced, which
returns a hostile parse's memory to the system. Small bodies and chunks stay on the loop:
the round trip costs more than their whole work.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

from kinference.bodies import Body, BodyStore, ByteBudget, Observation
from kinference.errors import ResourceExhausted, ServerBusy, Unavailable
from kinference.requests.parse import InferenceRequest
from kinference.requests.process import WorkerLost, WorkerProcess
from kinference.requests.rewrite import Translation
from kinference.requests.scan import JsonScanner
from kinference.requests.shapes import Shape
from kinference.requests.shipping import payload, shipped_spans
from kinference.requests.translation import Untranslatable

log = logging.getLogger(__name__)

T = TypeVar("T")

# Bodies up to this size (bytes) are parsed on the loop at Pick: even the densest JSON of
# this size costs a few milliseconds, and the round trip would cost ordinary requests.
INLINE_PARSE_BYTES = 32 * 1024
# Chunk bytes below which an upload's chunks are scanned on the loop at once (Upload's
# `defer_observing_from`); larger ones come here.
INLINE_SCAN_BYTES = 4 * 1024
# Time a chunk is scanned on the loop before the rest goes to the worker (the scan stops
# between two events, each under ~0.5 ms): a chunk of base64 or prose takes a few events.
LOOP_SCAN_S = 0.001
RECYCLE_RSS_BYTES = 256 << 20  # a worker this large after a job is replaced
# A job's deadline: BASE_DEADLINE_S plus DEADLINE_S_PER_MIB per MiB sent (the densest
# bodies parse at ~2-4 MiB/s in the worker; one over this is stuck, or hostile beyond use).
BASE_DEADLINE_S = 30.0
DEADLINE_S_PER_MIB = 2.0
_ANSWER = {"parse": "parsed", "translate": "translated"}  # a costed job's answer
_WHAT = {  # what a costed job's two reservations are for, in RESOURCE_EXHAUSTED's text
    "parse": ("sending this body to the parser", "parsing this body"),
    "translate": ("sending this body to the translator", "translating this body"),
}


def scanned_store(budget: ByteBudget, *, max_body_bytes: int, ttl_s: float) -> BodyStore:
    """A body store whose uploads are scanned as this module expects: bodies over
    `INLINE_PARSE_BYTES` while they arrive (the counts decide whether their parse runs on the
    loop or in the worker: `loop_cost.py`), chunks over `INLINE_SCAN_BYTES` deferred here."""
    return BodyStore(
        budget,
        max_body_bytes=max_body_bytes,
        ttl_s=ttl_s,
        observer_factory=JsonScanner,
        observe_from_bytes=INLINE_PARSE_BYTES,
        defer_observing_from=INLINE_SCAN_BYTES,
    )


class Offload:
    """The parse worker and the turn its jobs take; `aclose` stops it."""

    def __init__(
        self,
        worker: WorkerProcess | None = None,
        *,
        deadline_s: float = BASE_DEADLINE_S,
        recycle_rss_bytes: int = RECYCLE_RSS_BYTES,
    ) -> None:
        """`deadline_s`: a job's deadline, plus DEADLINE_S_PER_MIB per MiB it sends; a
        worker whose RSS passed `recycle_rss_bytes` after a parse is replaced."""
        self._worker = worker or WorkerProcess()
        self._deadline_s = deadline_s
        self._recycle_rss_bytes = recycle_rss_bytes
        self._turn = asyncio.Lock()  # one job in the worker at a time
        self._jobs: set[asyncio.Task[Any]] = set()
        self._closed = False

    @property
    def worker_pid(self) -> int | None:
        return self._worker.pid

    async def observe(self, observation: Observation) -> None:
        """Feed an upload's chunks to its observer: on the loop for up to LOOP_SCAN_S per
        chunk, the rest of a chunk in the worker."""
        scanner = observation.observer
        if not isinstance(scanner, JsonScanner):
            observation.run()
            return
        for piece in observation.pieces:
            consumed = scanner.feed_until(piece, time.perf_counter() + LOOP_SCAN_S)
            if consumed < len(piece):
                rest = bytes(piece[consumed:])
                scanned = await self._job(partial(self._scan, scanner, rest), len(rest))
                scanner.adopt(scanned)

    async def parse(
        self, budget: ByteBudget, body: Body, *, abandoned: Callable[[], None]
    ) -> InferenceRequest | str:
        """The request in `body` (or why it is none), parsed in the worker with its bytes
        and its estimated memory reserved from `budget` until the parse ends. Raises
        ResourceExhausted when the budget cannot hold them, Unavailable when the worker
        died or ran past its deadline. If this does not return normally, `abandoned()`
        runs once the job has ended."""
        spans = shipped_spans(body)
        scanner = body.observer if isinstance(body.observer, JsonScanner) else None
        meta = (body.size, body.request_path, scanner, spans)
        return await self._costed(budget, ("parse", meta), body, spans, abandoned)  # type: ignore[no-any-return]

    async def translate(
        self,
        budget: ByteBudget,
        body: Body,
        request: InferenceRequest,
        sent: Shape,
        *,
        abandoned: Callable[[], None],
    ) -> Translation | Untranslatable:
        """`request` (parsed from `body`) translated to `sent` in the worker, the whole body
        sent to it: `rewrite.translation` off the loop, with the body's bytes and the
        translation's estimated memory reserved from `budget` as for `parse` (which says
        what it raises, and when `abandoned()` runs)."""
        meta = (body.request_path, request.shape, sent)
        spans = [(0, body.size)]
        return await self._costed(budget, ("translate", meta), body, spans, abandoned)  # type: ignore[no-any-return]

    async def _costed(
        self,
        budget: ByteBudget,
        job: tuple[str, Any],
        body: Body,
        spans: list[tuple[int, int]],
        abandoned: Callable[[], None],
    ) -> Any:
        shipped = sum(end - start for start, end in spans)
        task: asyncio.Task[Any] | None = None
        try:
            task = self._start(lambda: self._run(budget, job, body, spans, shipped), shipped)
            return await asyncio.shield(task)
        except BaseException:
            if task is not None and not task.done():
                task.add_done_callback(lambda _: abandoned())
            else:
                abandoned()
            raise

    async def start(self) -> None:
        """Start the worker with the server and wait until it answers (its interpreter
        started and its imports done, ~0.2-0.4 s), so that no request waits for that. A
        worker that cannot start is logged, not fatal: big bodies then fail UNAVAILABLE
        while the rest is served, and each job tries again."""
        try:
            await self._job(self._ping, 0)
        except Unavailable as exc:
            log.warning("the parse worker did not start: %s", exc)

    async def _ping(self) -> None:
        await self._worker.send("ping", None)
        self._answer(await self._worker.receive(), "pong")

    async def aclose(self) -> None:
        """Stop the jobs under way and the worker; a job begun from now on fails at once."""
        self._closed = True  # a later job would start a worker that nobody closes
        for job in list(self._jobs):
            job.cancel()
        await asyncio.gather(*self._jobs, return_exceptions=True)
        await self._worker.aclose()

    async def _job(self, steps: Callable[[], Awaitable[T]], shipped: int) -> T:
        return await asyncio.shield(self._start(steps, shipped))

    def _start(self, steps: Callable[[], Awaitable[T]], shipped: int) -> asyncio.Task[T]:
        if self._closed:
            raise Unavailable("the body parser is closed (the server is stopping)")
        task = asyncio.get_running_loop().create_task(self._in_turn(steps, shipped))
        self._jobs.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        """A job's end: its failure is its caller's (one that went away no longer waits for
        it: not asyncio's "exception was never retrieved", logged at ERROR)."""
        self._jobs.discard(task)
        if not task.cancelled():
            task.exception()

    async def _in_turn(self, steps: Callable[[], Awaitable[T]], shipped: int) -> T:
        deadline_s = self._deadline_s + DEADLINE_S_PER_MIB * shipped / (1 << 20)
        async with self._turn:
            try:
                async with asyncio.timeout(deadline_s):
                    return await steps()
            except TimeoutError:
                self._worker.kill()
                raise Unavailable(
                    f"the body parser took longer than {deadline_s:.0f} s and was stopped"
                ) from None
            except WorkerLost as exc:
                raise Unavailable(str(exc)) from None
            except asyncio.CancelledError:
                self._worker.kill()  # stopped mid-frame: the pipe is out of step
                raise

    async def _scan(self, scanner: JsonScanner, rest: bytes) -> JsonScanner:
        await self._worker.send("scan", scanner, (rest,))
        return self._answer(await self._worker.receive(), "scanned")  # type: ignore[no-any-return]

    async def _run(
        self,
        budget: ByteBudget,
        job: tuple[str, Any],
        body: Body,
        spans: list[tuple[int, int]],
        shipped: int,
    ) -> Any:
        """Send the job and its bytes, reserve the cost it answers, let it run; its answer.
        A worker grown past the recycle bound by the job is replaced before the turn ends."""
        kind, meta = job
        _reserve(budget, shipped, _WHAT[kind][0])
        try:
            await self._worker.send(kind, meta, payload(body, spans))
            cost: int = self._answer(await self._worker.receive(), "cost")
            try:
                _reserve(budget, cost, _WHAT[kind][1])
            except ResourceExhausted:
                await self._worker.send("drop", None)
                raise
            try:
                await self._worker.send("go", None)
                answer, rss = self._answer(await self._worker.receive(), _ANSWER[kind])
            finally:
                budget.release(cost)
        finally:
            budget.release(shipped)
        if rss > self._recycle_rss_bytes:  # in this job's turn: no other job uses the worker
            try:
                await self._worker.replace()  # its memory goes back to the system
            except WorkerLost as exc:  # none started, the old one stopped: the next job tries
                log.warning("the parse worker was not replaced: %s", exc)
        return answer

    def _answer(self, message: tuple[str, Any], expected: str) -> Any:
        kind, data = message
        if kind == "failed":  # the worker reported it and waits for the next job
            raise Unavailable(f"the body parser failed: {data}")
        if kind != expected:
            self._worker.kill()  # out of step: start afresh
            raise Unavailable(f"the body parser answered {kind!r}, not {expected!r}")
        return data


def _reserve(budget: ByteBudget, nbytes: int, what: str) -> None:
    try:
        budget.reserve(nbytes)
    except ServerBusy:
        raise ServerBusy(
            f"{what} needs ~{nbytes} bytes of the server-wide body budget, "
            f"which holds {budget.used} of {budget.limit}"
        ) from None

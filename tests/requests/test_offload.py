"""The parse worker process: a big body parses there to the request a local parse gives,
dense chunks are scanned there, its memory is charged while it works, and a worker that
dies or runs late fails its job with UNAVAILABLE and is replaced at the next job."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import sys

import pytest

from kinference.bodies import Body, ByteBudget, Observation
from kinference.errors import ResourceExhausted, Unavailable
from kinference.requests import InferenceRequest, JsonScanner, parse_request
from kinference.requests.offload import Offload
from kinference.requests.process import WorkerProcess
from tests.api.helpers import wait_until
from tests.requests import pieces_of, scanner_for, uploaded_body

MiB = 1 << 20


def big_request(tools: int = 3000) -> bytes:
    content = "a long question " * 8000
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": content}],
        "tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(tools)],
        "extra": [{}] * 50_000,
    }
    return json.dumps(body).encode()


class Released:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


async def test_a_big_body_parses_in_the_worker_to_the_local_request() -> None:
    offload, budget, released = Offload(), ByteBudget(256 * MiB), Released()
    body = uploaded_body(big_request())
    try:
        parsed = await offload.parse(budget, body, abandoned=released)
        assert isinstance(parsed, InferenceRequest)
        local = parse_request(body)
        assert (parsed.model, parsed.shape, parsed.prompt) == (
            local.model,
            local.shape,
            local.prompt,
        )
        assert parsed.token_estimate == local.token_estimate and parsed.has_tools
        assert offload.worker_pid not in (None, os.getpid())
    finally:
        await offload.aclose()
    assert budget.used == 0 and released.count == 0


async def test_a_malformed_body_comes_back_as_its_reason() -> None:
    offload, budget = Offload(), ByteBudget(64 * MiB)
    data = b'{"model": "m", "messages": [' + b"1," * 40_000 + b"}"
    body = Body(pieces_of(data, 4096), reserved=len(data))
    try:
        parsed = await offload.parse(budget, body, abandoned=Released())
    finally:
        await offload.aclose()
    assert isinstance(parsed, str) and "invalid JSON" in parsed


async def test_a_parse_the_budget_cannot_hold_is_refused_and_nothing_stays_charged() -> None:
    offload, budget, released = Offload(), ByteBudget(3 * MiB), Released()
    body = uploaded_body(big_request())  # ~1.2 MiB shipped, tens of MiB to parse
    try:
        with pytest.raises(ResourceExhausted, match="parsing this body needs"):
            await offload.parse(budget, body, abandoned=released)
        assert budget.used == 0 and released.count == 1
        after = await offload.parse(ByteBudget(256 * MiB), body, abandoned=released)
        assert isinstance(after, InferenceRequest)  # the worker dropped it and went on
    finally:
        await offload.aclose()


async def test_a_dense_chunk_is_scanned_in_the_worker_to_the_same_state() -> None:
    # One 9 MB chunk: ~8 ms of scanning here, 8x LOOP_SCAN_S (900 kB scanned in ~0.75 ms
    # on an idle machine, so a 1 MiB chunk could finish on the loop and skip the worker).
    data = b'{"model": "m", "x": [' + b"{}," * 2_999_999 + b'{}], "prompt": "hi"}'
    offload = Offload()
    scanner = JsonScanner()
    try:
        await offload.observe(Observation(scanner, pieces_of(data, None)))
        assert offload.worker_pid is not None  # the loop could not finish it in 1 ms
    finally:
        await offload.aclose()
    reference = scanner_for([data])
    assert scanner.complete and scanner.members == reference.members


async def test_a_killed_worker_fails_its_job_and_the_next_one_starts_another() -> None:
    offload, budget, released = Offload(), ByteBudget(256 * MiB), Released()
    body = uploaded_body(big_request(tools=30_000))
    try:
        await offload.parse(budget, uploaded_body(big_request(tools=1)), abandoned=released)
        first = offload.worker_pid
        assert first is not None
        parsing = asyncio.ensure_future(offload.parse(budget, body, abandoned=released))
        # Kill only once the job is under way on this worker: its bytes are reserved in the
        # step that begins sending them. Killed before that, the job would find the worker
        # dead (`poll()`), start another and succeed: one loop turn is not enough under load.
        async with asyncio.timeout(30):
            while budget.used == 0:  # noqa: ASYNC110 (the budget has no event to await)
                await asyncio.sleep(0)
        os.kill(first, signal.SIGKILL)
        with pytest.raises(Unavailable, match="parse worker stopped"):
            await parsing
        assert released.count == 1
        again = await offload.parse(budget, body, abandoned=released)
        assert isinstance(again, InferenceRequest) and offload.worker_pid != first
    finally:
        await offload.aclose()
    assert budget.used == 0


async def test_a_worker_past_its_deadline_is_stopped() -> None:
    hung = WorkerProcess((sys.executable, "-c", "import time; time.sleep(600)"))
    offload, budget, released = Offload(hung, deadline_s=0.5), ByteBudget(64 * MiB), Released()
    try:
        with pytest.raises(Unavailable, match="took longer than"):
            await offload.parse(budget, uploaded_body(big_request(tools=1)), abandoned=released)
    finally:
        await offload.aclose()
    assert budget.used == 0 and released.count == 1


async def test_a_caller_that_goes_away_leaves_the_job_to_end_and_release() -> None:
    offload, budget, released = Offload(), ByteBudget(256 * MiB), Released()
    try:
        parsing = asyncio.ensure_future(
            offload.parse(budget, uploaded_body(big_request()), abandoned=released)
        )
        await asyncio.sleep(0)
        parsing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await parsing
        # The next job waits its turn behind the abandoned one, which then has ended.
        await offload.parse(budget, uploaded_body(big_request(tools=1)), abandoned=Released())
        assert released.count == 1 and budget.used == 0
    finally:
        await offload.aclose()


async def test_a_job_whose_caller_went_away_fails_with_no_unretrieved_exception() -> None:
    """Nobody awaits a job whose caller went away: when it then failed (its deadline, a
    dead worker) asyncio logged "Task exception was never retrieved" with a traceback at
    ERROR, for every client that sent a hostile body and hung up."""
    hung = WorkerProcess((sys.executable, "-c", "import time; time.sleep(600)"))
    offload, budget, released = Offload(hung, deadline_s=0.05), ByteBudget(64 * MiB), Released()
    loop, reported = asyncio.get_running_loop(), []
    loop.set_exception_handler(lambda _, context: reported.append(context["message"]))
    try:
        parsing = asyncio.ensure_future(
            offload.parse(budget, uploaded_body(big_request(tools=1)), abandoned=released)
        )
        await asyncio.sleep(0)
        parsing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await parsing
        await wait_until(lambda: released.count == 1, 30, "the job's end")
        del parsing
        gc.collect()
    finally:
        loop.set_exception_handler(None)
        await offload.aclose()
    assert reported == [] and budget.used == 0


async def test_a_worker_grown_past_its_bound_is_replaced_after_its_parse() -> None:
    offload, budget = Offload(recycle_rss_bytes=1), ByteBudget(256 * MiB)
    try:
        first = await offload.parse(budget, uploaded_body(big_request()), abandoned=Released())
        first_pid = offload.worker_pid
        again = await offload.parse(budget, uploaded_body(big_request()), abandoned=Released())
        assert isinstance(first, InferenceRequest) and isinstance(again, InferenceRequest)
        assert offload.worker_pid != first_pid
    finally:
        await offload.aclose()
    assert budget.used == 0


async def test_a_started_offload_has_its_worker_before_the_first_job() -> None:
    offload, budget = Offload(), ByteBudget(256 * MiB)
    try:
        await offload.start()  # returns once the worker answered: ready for jobs
        started = offload.worker_pid
        assert started is not None
        parsed = await offload.parse(budget, uploaded_body(big_request()), abandoned=Released())
        assert isinstance(parsed, InferenceRequest) and offload.worker_pid == started
    finally:
        await offload.aclose()


async def test_recycling_replaces_the_worker_at_once_and_spares_concurrent_jobs() -> None:
    # Every job grows the worker past the bound: each is replaced within its job's turn, so
    # the jobs queued behind it run in the next worker instead of losing theirs mid-job.
    offload, budget = Offload(recycle_rss_bytes=1), ByteBudget(256 * MiB)
    try:
        first = await offload.parse(budget, uploaded_body(big_request()), abandoned=Released())
        replaced = offload.worker_pid
        assert isinstance(first, InferenceRequest) and replaced is not None
        results = await asyncio.gather(
            *(
                offload.parse(budget, uploaded_body(big_request()), abandoned=Released())
                for _ in range(4)
            )
        )
        assert all(isinstance(result, InferenceRequest) for result in results)
        assert offload.worker_pid not in (None, replaced)
    finally:
        await offload.aclose()
    assert budget.used == 0


async def test_a_worker_that_cannot_start_is_logged_and_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = WorkerProcess((sys.executable, "-c", "raise SystemExit(3)"))
    offload = Offload(broken)
    try:
        await offload.start()
    finally:
        await offload.aclose()
    assert "the parse worker did not start" in caplog.text


async def test_a_worker_whose_process_cannot_be_made_is_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    offload = Offload(WorkerProcess(("/nonexistent/kinference-worker",)))
    try:
        await offload.start()  # logged, as for a worker that exits at once
    finally:
        await offload.aclose()
    assert "the parse worker did not start" in caplog.text


async def test_a_parse_whose_worker_cannot_be_replaced_keeps_its_answer() -> None:
    """The worker is recycled after the job answered: a replacement that cannot start (no
    process for it: EMFILE, a missing program) fails the next job, not this parse."""
    worker = WorkerProcess()
    offload, budget = Offload(worker, recycle_rss_bytes=1), ByteBudget(256 * MiB)
    try:
        await offload.start()
        worker._command = ("/nonexistent/kinference-worker",)  # the next start fails
        parsed = await offload.parse(budget, uploaded_body(big_request()), abandoned=Released())
        assert isinstance(parsed, InferenceRequest)
        with pytest.raises(Unavailable, match="could not start"):
            await offload.parse(budget, uploaded_body(big_request()), abandoned=Released())
    finally:
        await offload.aclose()
    assert budget.used == 0


async def test_a_job_after_close_fails_at_once_and_starts_no_worker() -> None:
    """A job begun after `aclose` (a late upload's chunk, a Pick racing shutdown) started
    a worker that nobody closed: it fails UNAVAILABLE at once, no process is made and
    nothing stays charged."""
    worker, budget, released = WorkerProcess(), ByteBudget(256 * MiB), Released()
    offload = Offload(worker)
    await offload.aclose()
    try:
        with pytest.raises(Unavailable, match="closed"):
            await offload.parse(budget, uploaded_body(big_request()), abandoned=released)
        with pytest.raises(Unavailable, match="closed"):
            await offload._job(lambda: offload._scan(JsonScanner(), b"[]"), 2)
        await offload.start()  # logged, not fatal, as for a worker that cannot start
        assert worker.pid is None and budget.used == 0 and released.count == 1
        await offload.aclose()  # again: nothing to do
    finally:
        await worker.aclose()  # before the fix, the worker those jobs started

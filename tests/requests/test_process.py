"""The parse worker's process: a start or a replace cancelled half way (shutdown, a job's
deadline) leaves no worker running and no pipe open; a closed worker's pipes are closed
before the loop is gone."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import os
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

import pytest
import uvloop

from kinference.requests.process import WorkerLost, WorkerProcess
from tests.api.helpers import until

_IDLE = (sys.executable, "-c", "import sys; sys.stdin.buffer.read()")  # exits at EOF


def _children() -> set[int]:
    """This process's live or unreaped children (Linux)."""
    found: set[int] = set()
    for listed in Path("/proc/self/task").glob("*/children"):
        found.update(int(pid) for pid in listed.read_text().split())
    return found


async def _gone(pids: set[int]) -> bool:
    """Whether `pids` have all exited and been reaped, within 10 s."""
    return await until(lambda: not _children() & pids, 10.0)


def _exited(pid: int) -> bool:
    """Whether `pid` is a zombie: exited, not yet reaped."""
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


@pytest.mark.parametrize("replace", [False, True])
async def test_a_start_cancelled_half_way_leaves_no_worker_running(replace: bool) -> None:
    worker = WorkerProcess(_IDLE)
    before = _children()
    if replace:
        await worker.start()
    started = _children() - before
    task = asyncio.ensure_future(worker.replace() if replace else worker.start())
    await asyncio.sleep(0)  # its process made, the pipes being connected
    made = _children() - before - started
    assert made  # the new worker's process, cancelled before it was ready
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _gone(started | made)
    await worker.aclose()


async def test_a_closed_worker_s_pipes_are_closed_before_its_eof_is_read() -> None:
    worker = WorkerProcess(_IDLE)
    await worker.start()
    pid = worker.pid
    assert pid is not None
    await worker.aclose()  # the pytest loop ends right after: nothing may be left open
    assert await _gone({pid})


async def test_a_worker_that_exited_is_replaced_with_its_pipes_closed() -> None:
    worker = WorkerProcess((sys.executable, "-c", "pass"))
    await worker.start()
    first = worker.pid
    assert first is not None
    assert await until(lambda: _exited(first), 10.0)
    await worker.start()  # the exited one reaped, its ends closed, a new one started
    assert worker.pid != first
    assert await _gone({first})
    await worker.aclose()


class _Recording(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor, noting what it is given."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.given: list[object] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        self.given.append(fn)
        return super().submit(fn, *args, **kwargs)


async def test_a_worker_found_exited_is_closed_without_work_for_the_executor() -> None:
    """`poll()` reaped it already: killing it queued a `wait` on the loop's executor that
    had nothing to collect (and a kill of no process)."""
    worker = WorkerProcess((sys.executable, "-c", "pass"))
    await worker.start()
    first = worker.pid
    assert first is not None
    assert await until(lambda: _exited(first), 10.0)
    recording = _Recording()
    asyncio.get_running_loop().set_default_executor(recording)
    await worker.start()  # the exited one closed, a new one started
    assert worker.pid != first and recording.given == []
    assert await _gone({first})
    await worker.aclose()


async def test_a_close_cancelled_while_the_worker_lingers_kills_it() -> None:
    """A close waits up to 2 s for the worker to exit; cancelled in that wait (shutdown's
    own deadline, a replace under a job's deadline) it must not leave a worker that never
    reads its EOF running: here one asleep for a minute."""
    worker = WorkerProcess((sys.executable, "-c", "import time; time.sleep(60)"))
    await worker.start()
    pid = worker.pid
    assert pid is not None
    closing = asyncio.ensure_future(worker.aclose())
    await asyncio.sleep(0.1)  # in its wait for the exit
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert await _gone({pid})


async def test_a_worker_whose_process_cannot_be_made_is_lost() -> None:
    """No process (a missing interpreter; EMFILE, ENOMEM at fork): the job fails as for a
    worker that died (WorkerLost, UNAVAILABLE to the caller), not with the OSError, which
    also made `Offload.start` fatal to the server's start."""
    worker = WorkerProcess(("/nonexistent/kinference-worker",))
    with pytest.raises(WorkerLost, match="could not start"):
        await worker.send("ping", None)
    with pytest.raises(WorkerLost):
        await worker.start()
    await worker.aclose()


@pytest.mark.parametrize("steps", [1, 2, 3, 4])
def test_a_start_cancelled_on_uvloop_leaves_no_file_to_close_a_reused_descriptor(
    steps: int,
) -> None:
    """uvloop (the server's loop) closes the descriptor of a pipe whose connect failed but
    not its file object, which closed that number again when collected: by then another
    file's (a socket's, in the server). Cancelled `steps` loop steps into its start (while
    each pipe is connected, or after), no file opened afterwards loses its descriptor."""

    async def main() -> list[str]:
        worker = WorkerProcess(_IDLE)
        before = _children()
        task = asyncio.ensure_future(worker.start())
        for _ in range(steps):
            await asyncio.sleep(0)
        made = _children() - before
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await worker.aclose()
        assert await _gone(made)  # collected: nothing holds its Popen now
        files = [tempfile.TemporaryFile() for _ in range(4)]  # noqa: SIM115
        try:
            gc.collect()
            return [str(error) for error in map(_fstat_error, files) if error]
        finally:
            for file in files:
                with contextlib.suppress(OSError):
                    file.close()

    assert uvloop.run(main()) == []


def _fstat_error(file: IO[bytes]) -> OSError | None:
    try:
        os.fstat(file.fileno())
    except OSError as error:
        return error
    return None

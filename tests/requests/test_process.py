"""The parse worker's process: a start or a replace cancelled half way (shutdown, a job's
deadline) leaves no worker running and no pipe open; a closed worker's pipes are closed
before the loop is gone."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from kinference.requests.process import WorkerProcess
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

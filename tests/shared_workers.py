"""Parse workers lent to the test pickers, so that ~220 picker starts do not each start one.

`App.start` waits for its parse worker's interpreter and imports (~0.12 s a start). A worker
is stateless between jobs (`kinference.requests.worker`), so a test session keeps the
started ones (`WorkerPool`) and lends each picker one no other picker holds
(`LentWorker`): its pipes are duplicated and connected to the test's own event loop, and
given back when the picker closes. What ends a worker's use in the product ends its life
here too: `kill` (a job over its deadline, a cancelled job, a worker out of step, a lost
worker) and `replace` (recycled after a bloating job) stop the process, and the next job
gets another; a worker that exited is never lent again. Tests that measure the worker
itself (its CPU time) start pickers with workers of their own (`own_parse_worker=True`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import subprocess
import sys
import time
from asyncio.streams import FlowControlMixin
from collections.abc import Sequence
from typing import IO, Any

from kinference.bodies import Piece
from kinference.requests import frames
from kinference.requests.process import WorkerLost, WorkerProcess

_COMMAND = (sys.executable, "-m", "kinference.requests.worker")  # as WorkerProcess's
_PIPE_BYTES = 1 << 20  # as WorkerProcess's pipes
_EXIT_WAIT_S = 2.0
_CLOSE_WAIT_S = 0.5  # the session's end: idle workers exit at once on EOF


class WorkerPool:
    """Started parse workers not lent to any picker; `close` ends them (session end)."""

    def __init__(self) -> None:
        self._idle: list[subprocess.Popen[bytes]] = []

    def borrow(self) -> subprocess.Popen[bytes]:
        while self._idle:
            popen = self._idle.pop()
            if popen.poll() is None:
                return popen
            _release(popen)
        popen = subprocess.Popen(_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        for pipe in (popen.stdin, popen.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    fcntl.fcntl(pipe.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), _PIPE_BYTES)
        return popen

    def give_back(self, popen: subprocess.Popen[bytes]) -> None:
        self._idle.append(popen)

    def close(self) -> None:
        """All told to exit at once, then awaited within one shared bound and killed past
        it. (A worker whose stdin has a stray duplicate in this process never sees EOF:
        test_first_event leaked such duplicates, and each worker cost the whole 2 s wait,
        one after the other, ~6 s at the end of the suite.)"""
        for popen in self._idle:
            _close_pipes(popen)
        deadline = time.monotonic() + _CLOSE_WAIT_S
        for popen in self._idle:
            try:
                popen.wait(max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
        self._idle.clear()


def _close_pipes(popen: subprocess.Popen[bytes]) -> None:
    for pipe in (popen.stdin, popen.stdout):
        if pipe is not None:
            pipe.close()


def _release(popen: subprocess.Popen[bytes]) -> None:
    """End a worker: its stdin closed, it exits (killed if it lingers)."""
    _close_pipes(popen)
    try:
        popen.wait(_EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait()


class LentWorker(WorkerProcess):
    """A `WorkerProcess` whose process comes from `pool` and goes back to it on `aclose`."""

    def __init__(self, pool: WorkerPool) -> None:
        super().__init__()
        self._pool = pool
        self._popen: subprocess.Popen[bytes] | None = None
        self._ends: tuple[asyncio.StreamReader, asyncio.StreamWriter, Any] | None = None

    async def send(self, kind: str, data: Any, payload: Sequence[Piece] = ()) -> None:
        _, writer, _ = await self._attached()
        try:
            await frames.send(writer, kind, data, payload)
        except (BrokenPipeError, ConnectionResetError, RuntimeError) as exc:
            raise self._lost() from exc

    async def receive(self) -> tuple[str, Any]:
        reader, _, _ = await self._attached()
        try:
            return await frames.receive(reader)
        except asyncio.IncompleteReadError as exc:
            raise self._lost() from exc

    async def start(self) -> None:
        await self._attached()

    async def replace(self) -> None:
        self.kill()
        await self._attached()

    def kill(self) -> None:
        popen = self._detach()
        if popen is not None:
            with contextlib.suppress(ProcessLookupError):
                popen.kill()
            _release(popen)

    async def aclose(self) -> None:
        popen = self._detach()
        if popen is not None:
            self._pool.give_back(popen)

    def _lost(self) -> WorkerLost:
        code = None if self._popen is None else self._popen.poll()
        self.kill()
        return WorkerLost(f"the parse worker stopped (exit code {code})")

    async def _attached(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Any]:
        if self._ends is not None and self._popen is not None and self._popen.poll() is None:
            return self._ends
        self.kill()
        popen = self._pool.borrow()
        assert popen.stdin is not None and popen.stdout is not None
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        read_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), _dup(popen.stdout, "rb")
        )
        transport, protocol = await loop.connect_write_pipe(
            lambda: FlowControlMixin(loop), _dup(popen.stdin, "wb")
        )
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        self._popen, self._ends = popen, (reader, writer, read_transport)
        self.pid = popen.pid
        return self._ends

    def _detach(self) -> subprocess.Popen[bytes] | None:
        """Close this loop's ends of the pipes (duplicates: the pool's stay open)."""
        popen, ends, self._popen, self._ends = self._popen, self._ends, None, None
        if ends is not None:
            _, writer, read_transport = ends
            writer.close()
            read_transport.close()
        return popen


def _dup(pipe: IO[bytes], mode: str) -> IO[bytes]:
    return os.fdopen(os.dup(pipe.fileno()), mode, buffering=0)

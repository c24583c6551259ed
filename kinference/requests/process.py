"""The parse worker's process as the picker sees it: started with the server (or at first
use), replaced at once when recycled, restarted after it died or was stopped, closed at
shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import subprocess
import sys
from asyncio.streams import FlowControlMixin
from collections.abc import Sequence
from typing import Any

from kinference.bodies import Piece
from kinference.requests import frames

log = logging.getLogger(__name__)

_COMMAND = (sys.executable, "-m", "kinference.requests.worker")
_PIPE_BYTES = 1 << 20  # fewer wake-ups per MiB sent (Linux's default pipe-max-size)
_EXIT_WAIT_S = 2.0  # how long a closed worker may take to exit before it is killed


class WorkerLost(Exception):
    """The worker died, or was stopped, before it answered (or could not be started)."""


class WorkerProcess:
    """One worker; `send` and `receive` frames. Not shared between concurrent jobs: the
    caller serializes them (`offload.Offload`).

    Started with `subprocess.Popen` (vfork, then exec), not the event loop's subprocess
    support: uvloop runs the interpreter's at-fork hooks in the child before exec, and
    gRPC's hook there crashed the child (a segfault in an `event_engine` thread, seen
    once in a few starts beside gRPC traffic)."""

    def __init__(self, command: Sequence[str] = _COMMAND) -> None:
        self._command = tuple(command)
        self._process: _Running | None = None
        self.pid: int | None = None

    async def send(self, kind: str, data: Any, payload: Sequence[Piece] = ()) -> None:
        running = await self._started()
        try:
            await frames.send(running.writer, kind, data, payload)
        except (BrokenPipeError, ConnectionResetError, RuntimeError) as exc:
            raise self._lost() from exc  # RuntimeError: the transport closed with the pipe

    async def receive(self) -> tuple[str, Any]:
        running = await self._started()
        try:
            return await frames.receive(running.reader)
        except asyncio.IncompleteReadError as exc:
            raise self._lost() from exc

    async def start(self) -> None:
        """Start the worker ahead of its first job: the interpreter's start and imports
        (~0.2-0.4 s, in the child) then delay no request."""
        await self._started()

    async def replace(self) -> None:
        """Start a fresh worker, then close this one (idle: it exits at once)."""
        running, self._process = self._process, None
        try:
            await self._started()
        except BaseException:  # cancelled (shutdown, the job's deadline): the old one too
            if running is not None:
                running.kill()
            raise
        if running is not None:
            await running.aclose()

    def kill(self) -> None:
        """Stop the worker at once (a job over its deadline); the next job starts another."""
        running, self._process = self._process, None
        if running is not None:
            running.kill()

    async def aclose(self) -> None:
        """Close the worker's stdin (it exits after its job), kill it if it lingers."""
        running, self._process = self._process, None
        if running is not None:
            await running.aclose()

    async def _started(self) -> _Running:
        if self._process is not None and self._process.popen.poll() is not None:
            self._process.kill()  # it exited (reaped): the loop's ends of its pipes closed
            self._process = None
        if self._process is None:
            try:
                self._process = await _Running.start(self._command)
            except OSError as exc:  # no process or pipe for it: a missing program, EMFILE
                raise WorkerLost(f"the parse worker could not start: {exc}") from exc
            self.pid = self._process.popen.pid
            log.info("parse worker started (pid %d)", self.pid)
        return self._process

    def _lost(self) -> WorkerLost:
        running, self._process = self._process, None
        code = None if running is None else running.popen.poll()
        if running is not None:
            running.kill()
        log.warning("parse worker stopped (exit code %s)", code)
        return WorkerLost(f"the parse worker stopped (exit code {code})")


class _Running:
    """A started worker: the process and the loop's ends of its pipes."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        read_end: asyncio.BaseTransport,
    ) -> None:
        self.popen = popen
        self.reader = reader
        self.writer = writer
        self._read_end = read_end

    @classmethod
    async def start(cls, command: Sequence[str]) -> _Running:
        # vfork + exec: ~1 ms whatever the picker's size, no wait for the child to be ready.
        popen = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # noqa: ASYNC220
        assert popen.stdin is not None and popen.stdout is not None
        for pipe in (popen.stdin, popen.stdout):
            _widen(pipe.fileno())
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        read_end: asyncio.BaseTransport | None = None
        try:
            read_end, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), popen.stdout
            )
            transport, protocol = await loop.connect_write_pipe(
                lambda: FlowControlMixin(loop), popen.stdin
            )
        except BaseException:  # cancelled before the worker was ours: none is left running
            # A connect that failed closed its pipe's descriptor (uvloop: not its file, which
            # would close that number again when collected, by then another file's; closing
            # it now fails EBADF) or will close its file (asyncio: a step later; closed now).
            if read_end is not None:
                read_end.close()
            for pipe in (popen.stdin,) if read_end is not None else (popen.stdin, popen.stdout):
                with contextlib.suppress(OSError):
                    pipe.close()
            _stop(popen)
            raise
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        return cls(popen, reader, writer, read_end)

    def kill(self) -> None:
        self.writer.close()
        self._read_end.close()
        _stop(self.popen)

    async def aclose(self) -> None:
        self.writer.close()
        try:
            await asyncio.to_thread(self.popen.wait, _EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self.kill()
        except BaseException:  # cancelled (shutdown's deadline): not left running either
            self.kill()
            raise
        finally:  # not left for its EOF: the loop may be stopped before it is read
            self._read_end.close()


def _stop(popen: subprocess.Popen[bytes]) -> None:
    """Kill the worker; its exit status collected off the loop (a killed process exits at
    once). One that exited is reaped here (`poll`): nothing to kill or to wait for."""
    if popen.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        popen.kill()
    asyncio.get_running_loop().run_in_executor(None, popen.wait)


def _widen(fileno: int) -> None:
    """Raise the pipe's capacity, where Linux allows (F_SETPIPE_SZ)."""
    setter = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setter is not None:
        with contextlib.suppress(OSError):
            fcntl.fcntl(fileno, setter, _PIPE_BYTES)

"""The parse worker's process as the picker sees it: started at first use, restarted after
it died or was stopped, closed at shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import sys
from collections.abc import Sequence
from typing import Any

from kinference.bodies import Piece
from kinference.requests import frames

log = logging.getLogger(__name__)

_COMMAND = (sys.executable, "-m", "kinference.requests.worker")
_PIPE_BYTES = 1 << 20  # fewer wake-ups per MiB sent (Linux's default pipe-max-size)
_EXIT_WAIT_S = 2.0  # how long a closed worker may take to exit before it is killed


class WorkerLost(Exception):
    """The worker died, or was stopped, before it answered."""


class WorkerProcess:
    """One worker; `send` and `receive` frames. Not shared between concurrent jobs: the
    caller serializes them (`offload.Offload`)."""

    def __init__(self, command: Sequence[str] = _COMMAND) -> None:
        self._command = tuple(command)
        self._process: asyncio.subprocess.Process | None = None
        self.pid: int | None = None

    async def send(self, kind: str, data: Any, payload: Sequence[Piece] = ()) -> None:
        process = await self._started()
        assert process.stdin is not None
        try:
            await frames.send(process.stdin, kind, data, payload)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise self._lost() from exc

    async def receive(self) -> tuple[str, Any]:
        process = await self._started()
        assert process.stdout is not None
        try:
            return await frames.receive(process.stdout)
        except asyncio.IncompleteReadError as exc:
            raise self._lost() from exc

    def kill(self) -> None:
        """Stop the worker at once (a job over its deadline); the next job starts another."""
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            process.kill()
            asyncio.get_running_loop().create_task(process.wait())

    async def aclose(self) -> None:
        """Close the worker's stdin (it exits after its job), kill it if it lingers."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), _EXIT_WAIT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

    async def _started(self) -> asyncio.subprocess.Process:
        if self._process is None or self._process.returncode is not None:
            self._process = await asyncio.create_subprocess_exec(
                *self._command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            self.pid = self._process.pid
            for pipe in (self._process.stdin, self._process.stdout):
                _widen(pipe)
            log.info("parse worker started (pid %d)", self._process.pid)
        return self._process

    def _lost(self) -> WorkerLost:
        process, self._process = self._process, None
        code = None if process is None else process.returncode
        if process is not None and code is None:
            process.kill()
            asyncio.get_running_loop().create_task(process.wait())
        log.warning("parse worker stopped (exit code %s)", code)
        return WorkerLost(f"the parse worker stopped (exit code {code})")


def _widen(pipe: object) -> None:
    """Raise the pipe's capacity, where Linux allows (F_SETPIPE_SZ)."""
    transport = getattr(pipe, "transport", None) or getattr(pipe, "_transport", None)
    fileno = getattr(transport, "get_extra_info", lambda _: None)("pipe")
    setter = getattr(fcntl, "F_SETPIPE_SZ", None)
    if fileno is None or setter is None:
        return
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fcntl.fcntl(fileno.fileno(), setter, _PIPE_BYTES)

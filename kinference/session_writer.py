"""A PickerSession stream's outgoing frames, written in batches by one task.

A request's frames wake the writer at once, and everything queued by then (other requests'
frames, reports) goes out in the same message: at one request in flight nothing waits, at
many each message carries several. Reports alone do not wake it: they wait up to `HOLD_S`
for a request's frames to ride with (at one request in flight, the next request's), so a
report usually costs no message of its own. A message stays under the picker's 1 MiB
decode limit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from kinference.v1 import session_pb2 as spb

log = logging.getLogger(__name__)

HOLD_S = 0.005  # longest a report waits for company (seconds)
MAX_BATCH_BYTES = (1 << 20) - 4096  # under the picker's per-message decode limit
# Body bytes queued and not yet written before `room` makes uploads wait: the stream's
# flow control then reaches the clients sending the bodies (bytes; 16 full messages).
MAX_PENDING_BYTES = 16 << 20

Broken = Callable[[str], None]  # told why the stream broke
Unsent = Callable[[list[spb.ClientFrame]], None]


class Writer:
    """Queues frames and writes them with `write`; `broken` is told why if a write fails,
    `unsent` gets the reports still queued when the stream stops."""

    def __init__(
        self,
        write: Callable[[spb.ClientBatch], Awaitable[Any]],
        broken: Broken,
        unsent: Unsent,
        max_pending_bytes: int = MAX_PENDING_BYTES,
    ) -> None:
        self._write = write
        self._max_pending = max_pending_bytes
        self._broken = broken
        self._unsent = unsent
        self._pending: list[tuple[spb.ClientFrame, float | None]] = []
        self._pending_bytes = 0  # of the body chunks in `_pending`
        self._room = asyncio.Event()
        self._room.set()
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._closing = False
        self._stopped = False
        self._task = asyncio.create_task(self._run(), name="kinference-session-writer")

    def put(
        self, frame: spb.ClientFrame, *, lazy: bool = False, first_token_at: float | None = None
    ) -> None:
        """Queue `frame`; a lazy one (a report) waits up to HOLD_S for company.
        `first_token_at` (monotonic): when the first token reported came."""
        self._pending.append((frame, first_token_at))
        if frame.chunk:
            self._pending_bytes += len(frame.chunk)
            if self._pending_bytes >= self._max_pending:
                self._room.clear()
        if not lazy:
            self._wake.set()
        elif self._timer is None and not self._wake.is_set():
            self._timer = self._loop.call_later(HOLD_S, self._wake.set)

    @property
    def full(self) -> bool:
        """True while `max_pending_bytes` of body chunks wait to be written."""
        return not self._room.is_set()

    async def room(self) -> None:
        """Return once the body chunks queued are under `max_pending_bytes` (or the
        stream stopped)."""
        await self._room.wait()

    async def flush_and_close(self, done_writing: Callable[[], Awaitable[Any]]) -> None:
        """Write everything queued, then half-close the stream."""
        self._closing = True
        self._wake.set()
        await asyncio.wait({self._task})  # neither raises nor cancels the writer
        if not self._stopped:
            await done_writing()

    def stop(self) -> None:
        """The stream is gone: hand back the reports not written."""
        if self._stopped:
            return
        self._stopped = True
        self._task.cancel()
        if self._timer is not None:
            self._timer.cancel()
        reports = [frame for frame, _ in self._pending if frame.WhichOneof("report")]
        self._pending = []
        self._pending_bytes = 0
        self._room.set()  # uploads waiting for room learn of the end from their answer
        if reports:
            self._unsent(reports)

    async def _run(self) -> None:
        try:
            while not (self._closing and not self._pending):
                await self._wake.wait()
                self._wake.clear()
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                while self._pending:
                    await self._write(self._batch())
        except grpc.aio.AioRpcError as error:  # the stream broke (or ended) under a write
            self._broken(f"{error.code().name} {error.details() or ''}".strip())
        except (asyncio.InvalidStateError, grpc.aio.UsageError) as error:  # the call ended
            self._broken(str(error))

    def _batch(self) -> spb.ClientBatch:
        """The queued frames that fit in one message, in order."""
        batch = spb.ClientBatch()
        frames, size, taken = batch.frames, 0, 0
        now = time.monotonic()
        for frame, first_token_at in self._pending:
            nbytes = frame.ByteSize() + 8
            if taken and size + nbytes > MAX_BATCH_BYTES:
                break
            if first_token_at is not None:
                frame.first_token_ago_ms = int((now - first_token_at) * 1000)
            frames.append(frame)
            size += nbytes
            taken += 1
            self._pending_bytes -= len(frame.chunk)
        del self._pending[:taken]
        if self._pending_bytes < self._max_pending:
            self._room.set()
        return batch

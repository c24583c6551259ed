"""The picker's side of a PickerSession stream going out: frames batched into messages.

One writer task per stream writes the frames that are ready in one ServerBatch, so answers
made in the same loop turn share a message, and one alone goes out at once. A message stays
under gRPC's default receive limit (4 MiB), which a caller's channel may keep: frames that
would take it past `MAX_BATCH_BYTES` (bodies inline, queued while the caller read late) go
in the next. A caller that stops reading fills its queue; the stream's reader waits for
room (`room`) before it reads on, so what the picker holds for one stream is bounded. A
body sent inline stays counted in the server-wide body budget until its frame is written
(`release`), as a body being pulled does until it is sent: answers a caller does not read
hold no memory past that budget.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from kinference.v1 import session_pb2 as spb

# The most bytes of frames in one ServerBatch (one frame alone may pass it): under gRPC's
# default limit for a received message (4 MiB), with room for each frame's tag and length.
MAX_BATCH_BYTES = (4 << 20) - (64 << 10)


class Outbox:
    """Frames for one stream, written in batches by `run` until `close`; at `max_queued`
    frames unwritten, `room` waits (KINFERENCE_SESSION_MAX_QUEUED_FRAMES). The body of a
    frame put here is reserved in the body budget, which `release` is given back once the
    frame is written (or dropped: `drop`)."""

    def __init__(
        self,
        write: Callable[[spb.ServerBatch], Awaitable[None]],
        max_queued: int,
        release: Callable[[int], None],
    ) -> None:
        self._write = write
        self._max_queued = max_queued
        self._release = release
        self._frames: list[spb.ServerFrame] = []
        self._writing: list[spb.ServerFrame] = []
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._closing = False

    def put(self, frame: spb.ServerFrame) -> None:
        self._frames.append(frame)
        self._wake.set()
        if len(self._frames) >= self._max_queued:
            self._room.clear()

    async def room(self) -> None:
        """Return once the queue is below its bound."""
        if not self._room.is_set():
            await self._room.wait()

    def close(self) -> None:
        """Write what is queued, then end `run`."""
        self._closing = True
        self._wake.set()

    def unwritten(self) -> list[spb.ServerFrame]:
        """Frames not known to be written (after `run` failed or was cancelled)."""
        return [*self._writing, *self._frames]

    def drop(self) -> None:
        """Forget the frames not written (the stream ended), releasing their bodies."""
        self._release(_body_bytes(self.unwritten()))
        self._writing, self._frames = [], []

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._frames:
                if self._closing:
                    return
                continue
            self._writing, self._frames = _batch(self._frames)
            await self._write(spb.ServerBatch(frames=self._writing))
            self._release(_body_bytes(self._writing))
            self._writing = []
            if self._frames:  # what did not fit goes in the next message
                self._wake.set()
            if len(self._frames) < self._max_queued:
                self._room.set()


def _batch(frames: list[spb.ServerFrame]) -> tuple[list[spb.ServerFrame], list[spb.ServerFrame]]:
    """(the frames of the next message, the rest): at least one frame, and no more than
    `MAX_BATCH_BYTES` with two or more."""
    if len(frames) == 1:
        return frames, []
    size = 0
    for index, frame in enumerate(frames):
        size += frame.ByteSize() + 16  # its tag and length within the batch, at most
        if size > MAX_BATCH_BYTES and index:
            return frames[:index], frames[index:]
    return frames, []


def _body_bytes(frames: list[spb.ServerFrame]) -> int:
    return sum(len(frame.body) for frame in frames)

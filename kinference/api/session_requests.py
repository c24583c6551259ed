"""The open requests of one PickerSession stream, from `start` to the pick (or failure).

Each is a PushBody in all but transport: `begin_push` at `start` (budgets, draining), every
chunk through `Upload.add` (per-chunk, per-request and server-wide budgets, declared
length), the inter-chunk idle limit as a timer, `commit_push` at `end`. A request that fails
is released and answered once (`failed`); frames the caller still sends for it are ignored.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from kinference.api import convert, extensions
from kinference.bodies import Observation, Upload
from kinference.errors import IdleTimeout, PickerError, ServerBusy
from kinference.service import PickCall, PickerService
from kinference.settings import Settings
from kinference.v1 import session_pb2 as spb

# The largest body sent back inline on a stream, whatever the caller asks (it shares the
# stream with every other request: a larger one is pulled with PullBody).
INLINE_BODY_LIMIT = 1 << 20


class StreamFault(Exception):
    """The caller broke the stream's rules (an id reused, a frame for no request)."""


@dataclass(slots=True)
class Open:
    """A request between its `start` and its answer."""

    id: int
    call: PickCall
    inline_body_max: int
    path: str
    upload: Upload | None  # None once the body is complete (picking)
    timer: asyncio.TimerHandle | None = None
    task: asyncio.Task[None] | None = None


Failed = Callable[[int, PickerError], None]


@dataclass(frozen=True, slots=True)
class Limits:
    """What one stream may hold (settings `body_idle_timeout_s`, `session_max_*`)."""

    idle_timeout_s: float  # the longest gap between two chunks of one body
    # Requests open at once; a `start` beyond fails with RESOURCE_EXHAUSTED and
    # `server_busy` (retry later), as a PushBody over the server-wide budget would.
    max_open_requests: int
    max_queued_frames: int  # answers unwritten before the stream's reading stops

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        return cls(
            settings.body_idle_timeout_s,
            settings.session_max_open_requests,
            settings.session_max_queued_frames,
        )


class Requests:
    """The stream's open requests by id; ids only ever grow."""

    def __init__(self, service: PickerService, limits: Limits, failed: Failed) -> None:
        self._service = service
        self._idle_s = limits.idle_timeout_s
        self._max_open = limits.max_open_requests
        self._failed = failed
        self._open: dict[int, Open] = {}
        self._last = 0
        self._loop = asyncio.get_running_loop()
        # The stream's reading stops while the picker scans a big chunk (`pause`): that is
        # no idle time of the caller's, so each budget runs again from the `resume`.
        self._paused = False
        self._resumed_at = -math.inf

    def __len__(self) -> int:
        return len(self._open)

    def frame(self, frame: spb.ClientFrame) -> Observation | None:
        """Apply a request's frame (all but its `end`, see `committed`); returns a big
        chunk's scan to run off the loop before the next frame."""
        request_id = frame.id
        if frame.HasField("start"):
            if request_id <= self._last:
                raise StreamFault(f"request id {request_id} is not above every earlier one")
            self._last = request_id
            try:
                self._start(request_id, frame.start)
            except PickerError as error:
                self._failed(request_id, error)
                return None
        opened = self._open.get(request_id)
        if opened is None:
            if request_id > self._last:
                raise StreamFault(f"request id {request_id} was never started")
            return None  # failed, answered or reset already: its late frames are dropped
        if frame.reset:
            self._drop(opened)
            return None
        if opened.upload is None or not frame.chunk:
            return None
        try:
            observation = opened.upload.add(frame.chunk)
        except PickerError as error:
            self._fail(opened, error)
            return None
        self._arm(opened)
        return observation

    def _start(self, request_id: int, start: spb.Start) -> None:
        if len(self._open) >= self._max_open:
            raise ServerBusy(f"{self._max_open} requests open on this session")
        call = convert.pick_call(start.pick)  # checked before any byte is held
        call = dataclasses.replace(call, stream_id=0)
        declared = start.declared_length if start.HasField("declared_length") else None
        upload = self._service.begin_push(declared, convert.request_id_of(start.client_request_id))
        path = start.request_path if extensions.usable_path(start.request_path) else ""
        inline = min(start.inline_body_max, INLINE_BODY_LIMIT)
        opened = Open(request_id, call, inline, path, upload)
        self._open[request_id] = opened
        self._arm(opened)

    def committed(self, request_id: int) -> Open | None:
        """The body of `request_id` is complete: stored, its call ready to pick; None when
        the request is not open (failed) or its body was refused at the end."""
        opened = self._open.get(request_id)
        if opened is None or opened.upload is None:
            return None
        upload, opened.upload = opened.upload, None
        self._disarm(opened)
        try:
            stream_id, _total = self._service.commit_push(upload, opened.path)
        except PickerError as error:
            self._service.discard_push(upload)
            del self._open[request_id]
            self._failed(request_id, error)
            return None
        opened.call = dataclasses.replace(opened.call, stream_id=stream_id)
        return opened

    def closed(self, request_id: int) -> None:
        """The request's pick ended (answered, failed or cancelled)."""
        self._open.pop(request_id, None)

    def end_uploads(self) -> None:
        """The caller half-closed: bodies it did not end never will."""
        for opened in [o for o in self._open.values() if o.upload is not None]:
            self._drop(opened)

    def discard_all(self) -> None:
        """The stream is gone: release every upload (picks are the stream's to cancel)."""
        for opened in list(self._open.values()):
            self._drop(opened)

    def _drop(self, opened: Open) -> None:
        """Release what `opened` holds, unanswered (reset, or the stream ended)."""
        self._open.pop(opened.id, None)
        self._disarm(opened)
        if opened.upload is not None:
            self._service.discard_push(opened.upload)
            opened.upload = None
        if opened.task is not None:
            opened.task.cancel()  # its own cleanup releases the body

    def _fail(self, opened: Open, error: PickerError) -> None:
        self._drop(opened)
        self._failed(opened.id, error)

    def pause(self) -> None:
        """The picker reads no frame until `resume` (its own work on what it read)."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._resumed_at = self._loop.time()

    def _arm(self, opened: Open) -> None:
        """(Re)start the inter-chunk budget: only body bytes are progress."""
        if opened.timer is not None:
            opened.timer.cancel()
        opened.timer = self._loop.call_later(self._idle_s, self._idle, opened)

    def _disarm(self, opened: Open) -> None:
        if opened.timer is not None:
            opened.timer.cancel()
            opened.timer = None

    def _idle(self, opened: Open) -> None:
        opened.timer = None
        if self._open.get(opened.id) is not opened or opened.upload is None:
            return
        since = self._loop.time() - self._resumed_at
        if self._paused or since < self._idle_s:  # the picker's time, not the caller's
            wait = self._idle_s if self._paused else self._idle_s - since
            opened.timer = self._loop.call_later(wait, self._idle, opened)
            return
        detail = f"no body bytes for {self._idle_s:g} s (inter-chunk budget)"
        self._fail(opened, IdleTimeout(detail))

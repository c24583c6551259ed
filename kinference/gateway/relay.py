"""The upstream response on its way back: relayed as it comes, metered, transformed if asked.

The HTTP layer calls `start()` (a whole body that a transform rewrites is read first, so its
length is known), sends `status` and `headers`, iterates `body()` at the client's pace (each
send waits for the socket, so a slow reader slows the upstream read: backpressure end to
end) and calls `finish()` exactly once however the response ends. `finish` hands the
upstream connection back (or drops it) and tells the picker how it went: ReportFinalToken
after a complete response, Abort otherwise.

Metering (kinference.gateway.usage) sees the upstream's bytes; the client sees what the
response transform (kinference.gateway.hooks) makes of them. Without a transform a
stream's bytes are forwarded exactly as received, an event's once it is whole. With `direct`
set, an event stream's reads are piped: metered and written from the upstream's read
callback, the iteration yielding only what `direct` could not write and the last read.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable

from kinference.gateway.hooks import ResponseTransform
from kinference.gateway.http1 import Broken, Response, UpstreamError
from kinference.gateway.port import Reports
from kinference.gateway.sse import SseEvent, SseSplitter
from kinference.gateway.timing import TokenClock
from kinference.gateway.upstream import response_headers
from kinference.gateway.usage import ResponseMeter, Usage
from kinference.v1 import picker_pb2 as pb

log = logging.getLogger(__name__)

_ERROR_FROM = 400  # upstream statuses from here on end the request with an Abort

# Called once when the relay finishes: (status sent, usage when complete, the token clock).
FinishObserver = Callable[[int, Usage | None, TokenClock], None]


class Relay:
    """One dispatched request whose upstream answered with a response head."""

    def __init__(
        self,
        response: Response,
        clock: TokenClock,
        reports: Reports,
        *,
        fallback_model: str,
        transform: ResponseTransform | None = None,
        on_finish: FinishObserver | None = None,
        max_whole_bytes: int,
    ) -> None:
        """`max_whole_bytes`: a whole body that `transform` rewrites is held before its head
        goes out; past this many bytes (the gateway's `max_body_bytes`, the largest request
        body it takes) the upstream is taken for broken or hostile: the response fails (502)
        and its connection is closed."""
        self.response = response
        content_type = response.header("content-type").lower()
        self._event_stream = content_type.startswith("text/event-stream")
        self._meter = ResponseMeter(event_stream=self._event_stream, clock=clock)
        self._clock = clock
        self._reports = reports
        self.model = fallback_model  # the model the client asked for
        self._transform = transform
        self._on_finish = on_finish
        self._max_whole_bytes = max_whole_bytes
        self._complete = False
        self._finished = False
        self._failure = ""
        self._first_due = False  # the first token went by and is not reported yet
        self._whole: bytes | None = None  # a transformed whole body, read by start()
        self._splitter = SseSplitter()  # an event stream's, into events
        self._live = transform  # an event stream's transform, None once bytes go as they came
        # Set by the HTTP layer: writes a body piece to the client at once (True), or cannot
        # (False: the socket is full, the client gone ...); then `body()` pipes the stream.
        self.direct: Callable[[bytes], bool] | None = None
        self._stalled = b""  # piped bytes `direct` could not write, for `body()` to yield
        self._unended = False  # yielding them: the response's end may have come since, not
        # the body's (an unended event's tail, a transform's end come after): not `ending`
        self._pipe_error: Exception | None = None
        self.upstream_status = response.status
        self.status = transform.status(response.status) if transform else response.status
        self.headers = response_headers(response.headers)
        if not self._event_stream and transform is None and not response.decoded:
            length = response.header("content-length")
            if length:
                self.headers.append(("content-length", length))
        if transform is not None:
            self.headers = transform.headers(self.headers)
        if self.upstream_status >= _ERROR_FROM:
            # The picker learns provider health from the status (429, 404, 5xx ...).
            clock.first_byte()
            reports.first_token(clock.ttft_ms or 0, self.upstream_status)

    async def start(self) -> None:
        """Read and transform a whole body before its head goes out (its length changes);
        raises `UpstreamError`, also past `max_whole_bytes`."""
        if self._transform is None or self._event_stream:
            return
        length, most = self.response.header("content-length"), self._max_whole_bytes
        if length.isdigit() and int(length) > most:
            raise self._too_large()
        chunks, size = [], 0
        async for chunk in self._chunks():
            self._first_due |= self._meter.feed(chunk)
            chunks.append(chunk)
            size += len(chunk)
            if size > most:
                raise self._too_large()
        self._whole = self._transform.whole(b"".join(chunks))
        self.headers.append(("content-length", str(len(self._whole))))
        self._complete = True

    def _too_large(self) -> Broken:
        """The failure of a whole body past `max_whole_bytes` (its Abort says so)."""
        self._failure = f"upstream body over {self._max_whole_bytes} bytes"
        return Broken(f"the response body passes {self._max_whole_bytes} bytes")

    @property
    def ending(self) -> bool:
        """The chunk `body()` just yielded is its last one (the upstream is done and read)."""
        return self._whole is not None or (self.response.drained and not self._unended)

    def body(self) -> AsyncGenerator[bytes, None]:
        """The response body for the client; reports the first token on the way.

        The first token is reported once the chunk carrying it has gone to the client (when
        the HTTP layer asks for the next one), so the report's work does not hold it back.
        Once `ending` is true after a yield, nothing but the end of the iteration follows,
        so the HTTP layer may send that chunk as the last. One generator per kind of body,
        reading the response's chunks itself: no generator in between on a stream's path
        (each layer costs its creation, the event loop's hooks and a hop per chunk).
        """
        if self._whole is not None:
            return self._held(self._whole)
        return self._events() if self._event_stream else self._plain()

    async def _held(self, whole: bytes) -> AsyncGenerator[bytes, None]:
        """A whole body `start()` read and transformed."""
        try:
            yield whole
            self._complete = True
        finally:
            self._report_first()

    async def _plain(self) -> AsyncGenerator[bytes, None]:
        """Any other body, relayed as it comes."""
        try:
            meter = self._meter
            async for chunk in self._chunks():
                self._first_due |= meter.feed(chunk)
                yield chunk
                self._report_first()
            self._complete = True
        finally:
            self._report_first()  # also when the client went away: it did come

    @property
    def between_events(self) -> bool:
        """An event stream whose bytes sent so far end with a whole event (an event the
        gateway adds next reaches the client as one): always, unless an endless event broke
        the splitting, since an unfinished event is held back (`_events`)."""
        return self._event_stream and not self._splitter.broken

    async def _events(self) -> AsyncGenerator[bytes, None]:
        """An event stream's bytes for the client, whole events only: an unfinished event's
        bytes are held until its end (a client's parser cannot use them before), so a
        stream cut in its middle can still end with an error event of the gateway's, which
        the client would otherwise read glued to the partial one (an event of broken JSON,
        where the SDKs raise a decode error instead of the API's). Without a transform the
        bytes go out as they came, only regrouped; an endless event (past
        `MAX_EVENT_BYTES`) goes out as it comes."""
        response, step = self.response, self._step
        read, piped = response.next_chunk, self._piped
        pipe = self.direct is not None
        try:
            try:
                while True:
                    if pipe:  # the reads the client's socket takes at once, written there
                        await response.pipe(piped)
                        if self._pipe_error is not None:
                            raise self._pipe_error
                        if out := self._stalled:  # the client's socket is full: wait for it
                            self._stalled, self._unended = b"", True
                            yield out
                            self._unended = False
                            self._report_first()
                            continue
                    if (chunk := await read()) is None:
                        break
                    if out := step(chunk):
                        yield out
                        self._report_first()
            except UpstreamError as exc:
                if not self._after_end(exc):
                    raise
            transform = self._live
            tail = self._splitter.take_rest() + (transform.end() if transform else b"")
            if tail:
                yield tail
                self._report_first()
            self._complete = True
        finally:
            self._report_first()  # also when the client went away: it did come

    def _step(self, chunk: bytes) -> bytes:
        """One read of an event stream metered; what goes to the client for it."""
        splitter, meter = self._splitter, self._meter
        first = False
        if (data := splitter.single(chunk)) is not None:  # one event: a token, most often
            shaped = meter.shaped(data)
            if shaped is not None and self._live is None:
                self._first_due |= shaped
                return chunk  # what `splitter.forward` gives after a single event
            events = [SseEvent(chunk, "", data)]
            first = meter.event(events[0]) if shaped is None else shaped
        else:
            events = splitter.feed(chunk)
            for event in events:
                first = meter.event(event) or first
        self._first_due |= first
        if self._live is None:
            return splitter.forward(self.response.drained)  # the last read: its tail too
        out, self._live = self._transformed(events, self._live)
        return out

    def _piped(self, chunk: bytes) -> bool:
        """`_step` from the upstream's read callback, its bytes written to the client at once
        by `direct`; False (the bytes kept in `_stalled`, or the error in `_pipe_error`, for
        the body's iteration) when they cannot be."""
        try:
            out = self._step(chunk)
            if not out:
                return True
            if self.direct is not None and self.direct(out):
                self._report_first()
                return True
            self._stalled = out
        except Exception as exc:  # raised in the body's iteration, as without the pipe
            self._pipe_error = exc
        return False

    def _transformed(
        self, events: list[SseEvent], transform: ResponseTransform
    ) -> tuple[bytes, ResponseTransform | None]:
        """What `transform` makes of one read's events, and the transform for the next read
        (None once the stream's bytes go out as they come)."""
        splitter = self._splitter
        out = b"".join([transform.event(event) for event in events])
        if splitter.broken:  # an endless event: from here on, bytes go out as they came
            out, splitter.spilled = out + splitter.spilled, b""
            return out, None
        if self.response.drained:  # the last read: its tail goes with it
            return out + splitter.take_rest() + transform.end(), None
        return out, transform

    async def _chunks(self) -> AsyncGenerator[bytes, None]:
        try:
            async for chunk in self.response.chunks():
                yield chunk
        except UpstreamError as exc:
            if not self._after_end(exc):
                raise

    def _after_end(self, exc: UpstreamError) -> bool:
        """Whether a failed read came after the stream's own end (the response is whole:
        its body ends there); else the failure is noted for the Abort."""
        if self._meter.ended:
            log.debug("upstream closed uncleanly after the stream's end: %s %s",
                      type(exc).__name__, exc)  # fmt: skip
            return True
        self._failure = f"upstream failed mid-response: {type(exc).__name__}"
        return False

    def _report_first(self) -> None:
        if self._first_due:
            self._first_due = False
            if self.upstream_status < _ERROR_FROM:
                self._reports.first_token(self._clock.ttft_ms or 0, self.upstream_status)

    def finish(self) -> None:
        """Release the upstream connection and report; safe to call more than once."""
        if self._finished:
            return
        self._finished = True
        self._report_first()  # a first token not reported yet comes before the last report
        self.response.close()
        usage = None
        if not self._complete:
            detail = self._failure or "client went away mid-response"
            self._reports.abort(pb.AbortRequest.REASON_UNSPECIFIED, detail)
        elif self.upstream_status >= _ERROR_FROM:
            detail = f"upstream answered {self.upstream_status}"
            self._reports.abort(pb.AbortRequest.REASON_UNSPECIFIED, detail)
        else:
            usage = self._meter.finish()
            self._reports.final(usage, self._clock, self.model)
        if self._on_finish is not None:
            status = self.status if self._complete else 499 if not self._failure else 502
            self._on_finish(status, usage, self._clock)

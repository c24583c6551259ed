"""The upstream response on its way back: bytes relayed as they come, timed and metered.

The HTTP layer iterates `body()` at the client's pace (each send waits for the socket, so a
slow reader slows the upstream read: backpressure end to end) and calls `finish()` exactly
once however the response ends. `finish` closes the upstream response (its connection goes
back to the pool or is dropped, never leaked) and tells the picker how it went:
ReportFinalToken after a complete response, Abort otherwise.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

import httpx

from kinference.gateway.reports import RequestReports
from kinference.gateway.timing import TokenClock
from kinference.gateway.translate import Translator
from kinference.gateway.translate.split import Splitter
from kinference.gateway.upstream import response_headers
from kinference.gateway.usage import ResponseMeter
from kinference.v1 import picker_pb2 as pb

_ERROR_FROM = 400  # upstream statuses from here on end the request with an Abort


class Relay:
    """One dispatched request whose upstream answered with headers."""

    def __init__(
        self,
        response: httpx.Response,
        clock: TokenClock,
        reports: RequestReports,
        *,
        fallback_model: str,
        translator: Translator | None = None,
    ) -> None:
        self.response = response
        self.status = response.status_code
        self.headers = response_headers(response.headers.multi_items())
        content_type = response.headers.get("content-type", "")
        self._translator = translator
        if translator is not None:
            self.headers = dict(translator.headers(list(self.headers.items())))
        self._event_stream = content_type.startswith("text/event-stream")
        self._meter = ResponseMeter(event_stream=self._event_stream, clock=clock)
        self._clock = clock
        self._reports = reports
        self._fallback_model = fallback_model
        self._complete = False
        self._finished = False
        self._failure = ""
        if self.status >= _ERROR_FROM:
            # The picker learns provider health from the status (429, 404, 5xx ...).
            clock.first_byte()
            reports.first_token(clock.ttft_ms or 0, self.status)

    async def body(self) -> AsyncGenerator[bytes, None]:
        """The response body as the upstream sends it; reports the first token on the way."""
        try:
            if self._translator is not None:
                async for out in self._translated(self._translator):
                    yield out
                self._complete = True
                return
            async for chunk in self._metered():
                yield chunk
        except httpx.HTTPError as exc:
            self._failure = f"upstream failed mid-response: {type(exc).__name__}"
            raise
        self._complete = True

    async def _metered(self) -> AsyncGenerator[bytes, None]:
        async for chunk in self.response.aiter_bytes():
            if self._meter.feed(chunk) and self.status < _ERROR_FROM:
                self._reports.first_token(self._clock.ttft_ms or 0, self.status)
            yield chunk

    async def _translated(self, translator: Translator) -> AsyncGenerator[bytes, None]:
        """The response in the client's API shape (the meter reads the upstream's bytes)."""
        if not self._event_stream:
            yield translator.whole(b"".join([chunk async for chunk in self._metered()]))
            return
        splitter = Splitter()
        async for chunk in self._metered():
            out = b"".join([translator.event(event) for event in splitter.feed(chunk)])
            if out:
                yield out
        tail = translator.end()
        if tail:
            yield tail

    def finish(self) -> None:
        """Close the upstream response and report; safe to call more than once."""
        if self._finished:
            return
        self._finished = True
        self._reports.reporter.spawn(self.response.aclose, "close upstream")
        if not self._complete:
            detail = self._failure or "client went away mid-response"
            self._reports.abort(pb.AbortRequest.REASON_UNSPECIFIED, detail)
        elif self.status >= _ERROR_FROM:
            detail = f"upstream answered {self.status}"
            self._reports.abort(pb.AbortRequest.REASON_UNSPECIFIED, detail)
        else:
            self._reports.final(self._meter.finish(), self._clock, self._fallback_model)

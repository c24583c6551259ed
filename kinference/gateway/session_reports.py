"""Reports of a request picked over the PickerSession stream: frames on that stream.

Each is a frame queued on the stream (no task, no call of its own; it rides with the next
batch), in order per request because the stream keeps order. When the stream is gone, a
report goes as the Picker service's call instead (`send_unary`), as do the reports that
were still queued when it broke.
"""

from __future__ import annotations

import logging
import time

import grpc

from kinference import itl_layout
from kinference.gateway.port import AbortReason
from kinference.gateway.reports import Reporter
from kinference.gateway.timing import TokenClock
from kinference.gateway.usage import Usage
from kinference.session_client import SessionClient
from kinference.v1 import picker_pb2 as pb
from kinference.v1 import session_pb2 as spb

log = logging.getLogger(__name__)


class SessionReports:
    """`Reports` of one request, as frames on `session`."""

    __slots__ = ("_reporter", "_response_id", "_session")

    def __init__(self, session: SessionClient, response_id: int, reporter: Reporter) -> None:
        self._session = session
        self._response_id = response_id
        self._reporter = reporter

    def first_token(self, ttft_ms: int, upstream_status: int) -> None:
        report = pb.ReportFirstTokenRequest(
            response_id=self._response_id,
            observed_ttft_ms=ttft_ms,
            upstream_status=upstream_status,
        )
        self._send(spb.ClientFrame(first_token=report), time.monotonic())

    def final(self, usage: Usage, clock: TokenClock, fallback_model: str) -> None:
        counts = clock.itl_bucket_counts
        report = pb.ReportFinalTokenRequest(
            response_id=self._response_id,
            model=usage.model or fallback_model,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            itl_bucket_counts=list(counts),
            itl_bucket_layout=itl_layout.LAYOUT if counts else 0,
        )
        if usage.cached_tokens is not None:
            report.cached_tokens = usage.cached_tokens
        self._send(spb.ClientFrame(final_token=report))

    def abort(self, reason: AbortReason, detail: str) -> None:
        abort = pb.AbortRequest(response_id=self._response_id, reason=reason, detail=detail[:500])
        self._send(spb.ClientFrame(abort=abort))

    def _send(self, frame: spb.ClientFrame, first_token_at: float | None = None) -> None:
        if not self._session.report(frame, first_token_at=first_token_at):
            send_unary(self._reporter, [frame])


def send_unary(reporter: Reporter, frames: list[spb.ClientFrame]) -> None:
    """Send report frames as the Picker service's calls, in order, off the response path."""
    stub = reporter.client.stub

    async def send() -> None:
        for frame in frames:
            kind = frame.WhichOneof("report")
            try:
                if kind == "first_token":
                    await stub.ReportFirstToken(frame.first_token, timeout=reporter.timeout_s)
                elif kind == "final_token":
                    await stub.ReportFinalToken(frame.final_token, timeout=reporter.timeout_s)
                elif kind == "abort":
                    await stub.Abort(frame.abort, timeout=reporter.timeout_s)
            except grpc.aio.AioRpcError as error:  # NOT_FOUND on Abort: already released
                if error.code() != grpc.StatusCode.NOT_FOUND:
                    log.warning("%s failed: %s %s", kind, error.code().name, error.details())

    reporter.spawn(send, "reports")

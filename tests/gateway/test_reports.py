"""The remote gateway's reports: in order, off the response path, and, with a picker that
knows kinference's extensions, the first-token report riding on the final one."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from kinference.client import PickerClient
from kinference.gateway.reports import Reporter, RequestReports
from kinference.gateway.timing import TokenClock
from kinference.gateway.usage import Usage
from kinference.v1 import picker_pb2 as pb

SETTLE_S = 10.0


class RecordingClient:
    """The report calls of a PickerClient, recorded in the order they were made."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.called = asyncio.Event()

    def _record(self, *call: Any) -> None:
        self.calls.append(call)
        self.called.set()

    async def first_token(self, response_id: int, ttft_ms: int, upstream_status: int) -> None:
        self._record("first", response_id, ttft_ms, upstream_status)

    async def final_token(self, response_id: int, **report: Any) -> None:
        first = report["first_token"]  # (ttft, status, ms since held): the age is timing
        self._record("final", response_id, first[:2] if first is not None else None)

    async def abort(self, response_id: int, reason: int, detail: str) -> None:
        self._record("abort", response_id, reason)


async def _settled(reporter: Reporter, client: RecordingClient, count: int) -> None:
    async with asyncio.timeout(SETTLE_S):
        while len(client.calls) < count:
            client.called.clear()
            await client.called.wait()
        await reporter.aclose()


def _reports(merge_first: bool) -> tuple[Reporter, RecordingClient, RequestReports]:
    client = RecordingClient()
    reporter = Reporter(cast(PickerClient, client), timeout_s=SETTLE_S)
    return reporter, client, RequestReports(reporter, 7, merge_first=merge_first)


async def test_the_first_token_rides_on_a_final_report_that_comes_soon() -> None:
    reporter, client, reports = _reports(merge_first=True)
    reports.first_token(12, 200)
    reports.final(Usage(model="m"), TokenClock(), "m")
    await _settled(reporter, client, 1)
    assert client.calls == [("final", 7, (12, 200))]


async def test_a_held_first_token_goes_alone_when_the_final_is_late() -> None:
    reporter, client, reports = _reports(merge_first=True)
    reports.first_token(12, 200)
    await _settled(reporter, client, 1)  # the hold ran out: sent on its own
    reports.final(Usage(model="m"), TokenClock(), "m")
    await _settled(reporter, client, 2)
    assert client.calls == [("first", 7, 12, 200), ("final", 7, None)]


async def test_an_abort_sends_the_held_first_token_before_it() -> None:
    reporter, client, reports = _reports(merge_first=True)
    reports.first_token(40, 503)
    reports.abort(pb.AbortRequest.REASON_UNSPECIFIED, "upstream answered 503")
    await _settled(reporter, client, 2)
    assert client.calls == [("first", 7, 40, 503), ("abort", 7, pb.AbortRequest.REASON_UNSPECIFIED)]


async def test_a_plain_picker_gets_both_reports() -> None:
    reporter, client, reports = _reports(merge_first=False)
    reports.first_token(12, 200)
    reports.final(Usage(model="m"), TokenClock(), "m")
    await _settled(reporter, client, 2)
    assert client.calls == [("first", 7, 12, 200), ("final", 7, None)]

"""The inter-chunk budget counts the caller's idle time only: while the picker itself is
busy with the bytes it read (a chunk's scan waiting for the parse worker), the caller is
not idle, and its push must not fail DEADLINE_EXCEEDED for it (on PushBody, and on a
PickerSession stream, where that scan holds up the reading of every request on it)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import pytest

from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import KiB, chunked, push, wait_nothing_held
from tests.api.session_helpers import body_of, opened, start
from tests.conftest import MODEL, PickerFactory, RunningPicker

IDLE_S = 0.3


def dense_body() -> bytes:
    """A body of ~700 KiB of small values: its chunks' scans go to the parse worker."""
    parts = [{"type": "text", "text": f"w{i}"} for i in range(20_000)]
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": parts}]}).encode()


@contextmanager
def worker_stopped(picker: RunningPicker) -> Iterator[None]:
    """The picker's parse worker does nothing meanwhile (as if busy with a long job)."""
    pid = picker.app.service.offload.worker_pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def chunks(body: bytes, size: int) -> AsyncIterator[bytes]:
    for chunk in chunked(body, size):
        yield chunk


async def test_a_busy_parse_worker_is_no_idle_time_of_the_callers(
    start_picker: PickerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every chunk is sent at once, but the picker reads none while the worker that scans
    them is busy (stopped here, for three times the budget): the push still succeeds."""
    monkeypatch.setattr("kinference.requests.offload.LOOP_SCAN_S", 0.0)  # scans go to it
    picker = await start_picker(body_idle_timeout_s=IDLE_S)
    body = dense_body()
    with worker_stopped(picker):
        pushing = asyncio.ensure_future(push(picker, body, chunk_size=64 * KiB))
        await asyncio.sleep(3 * IDLE_S)  # the worker's busy spell, not a wait for state
    pushed = await pushing  # DEADLINE_EXCEEDED ("no body bytes for 0.3 s") before the fix
    assert pushed.total_bytes == len(body)
    pick = await picker.client.pick(pushed.stream_id)
    assert await picker.client.pull_all(pick.response_id) == body
    assert (await picker.client.abort(pick.response_id)).released
    await wait_nothing_held(picker)


async def test_a_busy_parse_worker_is_no_idle_time_of_a_sessions_requests(
    start_picker: PickerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same on a PickerSession stream, beside a small request sent a byte at a time:
    both are picked."""
    monkeypatch.setattr("kinference.requests.offload.LOOP_SCAN_S", 0.0)
    picker = await start_picker(body_idle_timeout_s=IDLE_S)
    session = await opened(picker)
    big, small = dense_body(), body_of("x" * 200)
    with worker_stopped(picker):
        requests = [
            asyncio.ensure_future(session.push_and_pick(chunks(big, 64 * KiB), start(big))),
            asyncio.ensure_future(session.push_and_pick(chunks(small, 1), start(small))),
        ]
        await asyncio.sleep(3 * IDLE_S)  # the worker's busy spell, not a wait for state
    for (pick, extras), body in zip(await asyncio.gather(*requests), (big, small), strict=True):
        assert pick.outcome == pb.PickResponse.OK
        if extras.body is None:
            assert await picker.client.pull_all(pick.response_id) == body
        else:
            assert extras.body == body
        assert (await picker.client.abort(pick.response_id)).released
    await session.aclose(5)
    await wait_nothing_held(picker)

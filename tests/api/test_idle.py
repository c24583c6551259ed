"""The inter-chunk budget counts the caller's idle time only: while the picker itself is
busy with the bytes it read (a chunk's scan waiting for the parse worker), the caller is
not idle, and its push must not fail DEADLINE_EXCEEDED for it."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest

from tests.api.helpers import KiB, push, wait_nothing_held
from tests.conftest import MODEL, PickerFactory

IDLE_S = 0.3


def dense_body() -> bytes:
    """A body of ~700 KiB of small values: its chunks' scans go to the parse worker."""
    parts = [{"type": "text", "text": f"w{i}"} for i in range(20_000)]
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": parts}]}).encode()


async def test_a_busy_parse_worker_is_no_idle_time_of_the_callers(
    start_picker: PickerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every chunk is sent at once, but the picker reads none while the worker that scans
    them is busy (stopped here, for three times the budget): the push still succeeds."""
    monkeypatch.setattr("kinference.requests.offload.LOOP_SCAN_S", 0.0)  # scans go to it
    picker = await start_picker(body_idle_timeout_s=IDLE_S)
    pid = picker.app.service.offload.worker_pid
    assert pid is not None
    body = dense_body()
    os.kill(pid, signal.SIGSTOP)
    try:
        pushing = asyncio.ensure_future(push(picker, body, chunk_size=64 * KiB))
        await asyncio.sleep(3 * IDLE_S)  # the worker's busy spell, not a wait for state
    finally:
        os.kill(pid, signal.SIGCONT)
    pushed = await pushing  # DEADLINE_EXCEEDED ("no body bytes for 0.3 s") before the fix
    assert pushed.total_bytes == len(body)
    pick = await picker.client.pick(pushed.stream_id)
    assert await picker.client.pull_all(pick.response_id) == body
    assert (await picker.client.abort(pick.response_id)).released
    await wait_nothing_held(picker)

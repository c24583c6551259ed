"""A parse's memory is charged to the server-wide body budget (issue 15, item 1): many
giant bodies parsed at once never hold more than the budget admits, and a Pick whose parse
the budget cannot hold answers RESOURCE_EXHAUSTED with its body released."""

from __future__ import annotations

import asyncio
import json

import grpc

from kinference.requests.cost import parse_cost
from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import status_of, wait_nothing_held
from tests.conftest import MODEL, PickerFactory
from tests.requests import uploaded_body

KiB, MiB = 1 << 10, 1 << 20


def costly_body(members: int = 6, member_bytes: int = 64 * KiB) -> bytes:
    """A valid chat request with `members` unread members of dense `[{},{},...]`."""
    head = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    parts = [json.dumps(head)[:-1].encode()]
    for index in range(members):
        parts.append(b',"x%d":[' % index + b",".join([b"{}"] * (member_bytes // 3)) + b"]")
    return b"".join(parts) + b"}"


def chunks_of(data: bytes, size: int = 64 * KiB) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def test_the_estimate_covers_one_member_and_the_read_fields() -> None:
    one = parse_cost(uploaded_body(costly_body(members=1)))
    six = parse_cost(uploaded_body(costly_body(members=6)))
    assert one > 10 * 64 * KiB  # dense objects cost far more than their text
    assert six < 2 * one  # unread members are validated one at a time


async def test_a_parse_the_budget_cannot_hold_is_resource_exhausted(
    start_picker: PickerFactory,
) -> None:
    data = costly_body()
    cost = parse_cost(uploaded_body(data))
    picker = await start_picker(max_buffered_bytes=len(data) + cost // 2, max_body_bytes=len(data))
    pushed = await picker.client.push(chunks_of(data), declared_length=len(data))
    error = await status_of(picker.client.pick(pushed.stream_id))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "parsing this body" in (error.details() or "")
    await wait_nothing_held(picker)


async def test_concurrent_giant_parses_never_pass_the_server_budget(
    start_picker: PickerFactory,
) -> None:
    data = costly_body()
    cost = parse_cost(uploaded_body(data))
    # Room for eight bodies and one parse at a time: its copy in the worker and its objects.
    limit = 9 * len(data) + cost
    picker = await start_picker(max_buffered_bytes=limit, max_body_bytes=len(data))
    budget = picker.app.store.budget
    peak = 0
    stop = asyncio.Event()

    async def watch() -> None:  # every loop turn: the budget changes only on the loop
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, budget.used)
            await asyncio.sleep(0)

    async def caller() -> str:
        try:
            pushed = await picker.client.push(chunks_of(data), declared_length=len(data))
            pick = await picker.client.pick(pushed.stream_id)
        except grpc.aio.AioRpcError as exc:
            return exc.code().name
        await picker.client.abort(pick.response_id)
        return pb.PickResponse.Outcome.Name(pick.outcome)

    watcher = asyncio.create_task(watch())
    outcomes = await asyncio.gather(*(caller() for _ in range(16)))
    stop.set()
    await watcher
    assert set(outcomes) <= {"OK", "RESOURCE_EXHAUSTED"}, outcomes
    assert "OK" in outcomes
    assert cost <= peak <= limit  # a parse was charged, and never past the limit
    await wait_nothing_held(picker)

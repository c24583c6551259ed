"""The extensions that spare a remote caller RPCs, over a real server: pick on push
(`kinference-pick-bin`), the body inline in the pick's metadata, and the first-token report
folded into the final one."""

from __future__ import annotations

import json

import grpc
import pytest

from kinference.api import extensions
from kinference.client import pick_request
from kinference.config import parse_policy
from kinference.v1 import picker_pb2 as pb
from tests.conftest import MODEL, PickerFactory, RunningPicker

POLICY = f"""
pools:
  - {{namespace: default, name: chat, endpoints: ["127.0.0.1:1"], models: ["{MODEL}"]}}
"""
STREAMED = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}]}


async def _picker(factory: PickerFactory) -> RunningPicker:
    return await factory(parse_policy(POLICY))


async def test_a_push_that_picks_answers_the_pick_and_consumes_the_stream(
    start_picker: PickerFactory,
) -> None:
    picker = await _picker(start_picker)
    body = json.dumps(STREAMED).encode()
    request = pick_request(0, "team-a", pb.PickRequest.INTERACTIVE, None, "req-1")
    pushed, picked = await picker.client.push_and_pick(
        [body], request, declared_length=len(body), inline_body_max=4096
    )
    assert picked is not None
    pick, extras = picked
    assert pick.outcome == pb.PickResponse.OK and pick.local.endpoint == "127.0.0.1:1"
    # The rewritten body (usage asked for the stream) came inline and is released.
    assert extras.body is not None and len(extras.body) == pick.body_total_bytes
    assert json.loads(extras.body)["stream_options"] == {"include_usage": True}
    with pytest.raises(grpc.aio.AioRpcError) as pulled:
        await picker.client.pull_all(pick.response_id)
    assert pulled.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as again:
        await picker.client.pick(pushed.stream_id)
    assert again.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert picker.app.store.held_bodies == 0


async def test_a_body_over_the_inline_limit_is_pulled(start_picker: PickerFactory) -> None:
    picker = await _picker(start_picker)
    body = json.dumps(STREAMED).encode()
    request = pick_request(0, "", pb.PickRequest.INTERACTIVE, None, "")
    _, picked = await picker.client.push_and_pick([body], request, inline_body_max=len(body))
    assert picked is not None
    pick, extras = picked
    assert pick.body_total_bytes > len(body) and extras.body is None
    assert len(await picker.client.pull_all(pick.response_id)) == pick.body_total_bytes


async def test_pick_sends_the_body_inline_when_asked(start_picker: PickerFactory) -> None:
    picker = await _picker(start_picker)
    body = json.dumps({**STREAMED, "stream": False}).encode()
    pushed = await picker.client.push([body])
    pick, extras = await picker.client.pick_with_extras(pushed.stream_id, inline_body_max=1 << 20)
    assert extras.body == body  # unchanged, whole; the server caps what it sends inline
    assert picker.app.store.held_bodies == 0
    pushed = await picker.client.push([body])
    pick, extras = await picker.client.pick_with_extras(pushed.stream_id)
    assert extras.body is None  # not asked: PullBody as the spec has it
    assert await picker.client.pull_all(pick.response_id) == body


async def test_a_malformed_pick_on_push_is_refused_and_holds_nothing(
    start_picker: PickerFactory,
) -> None:
    picker = await _picker(start_picker)
    call = picker.client.stub.PushBody(
        iter([pb.BodyChunk(chunk=b"{}")]), metadata=[(extensions.PICK, b"\xff\xff")]
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert picker.app.store.held_bodies == 0


async def test_the_final_report_carries_the_first_token(start_picker: PickerFactory) -> None:
    picker = await _picker(start_picker)
    body = json.dumps(STREAMED).encode()
    request = pick_request(0, "", pb.PickRequest.INTERACTIVE, None, "")
    _, picked = await picker.client.push_and_pick([body], request, inline_body_max=4096)
    assert picked is not None
    response_id = picked[0].response_id
    answer = await picker.client.final_token(response_id, model=MODEL, first_token=(12, 200, 5))
    assert answer.acknowledged
    labels = {"kind": "first_token", "known": "true"}
    assert picker.metric("kinference_reports_total", labels) == 1.0


def test_caller_asks_ignores_hostile_values() -> None:
    asks = extensions.caller_asks(
        [
            (extensions.INLINE_BODY_MAX, "-1"),
            (extensions.FIRST_TOKEN, "12"),
            (extensions.PICK, "not bytes"),
        ]
    )
    assert asks == extensions.CallerAsks()
    asks = extensions.caller_asks(
        [(extensions.INLINE_BODY_MAX, "99999999"), (extensions.FIRST_TOKEN, "7:503")]
    )
    assert asks.inline_body_max == extensions.INLINE_BODY_LIMIT
    assert asks.first_token == (7, 503, 0)
    asks = extensions.caller_asks([(extensions.FIRST_TOKEN, "7:200:15")])
    assert asks.first_token == (7, 200, 15)
    assert extensions.caller_asks([(extensions.FIRST_TOKEN, "7:200:x")]).first_token is None

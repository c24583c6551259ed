"""A body naming a model no pool serves gets its NO_WORKERS answer whatever the name's
length. The answer echoes the name (`requested_model`, and in its reason); picked on push
it rides in the PushBody's trailing metadata, and a name of 16 KiB took that past gRPC's
default limit (16 KiB hard): the caller's PushBody failed RESOURCE_EXHAUSTED, where the
contract gives Pick's routing outcomes in the PickResponse, not as a transport failure."""

from __future__ import annotations

import json

from kinference.client import split_chunks
from kinference.config.fields import MAX_MODEL_CHARS
from kinference.v1 import picker_pb2 as pb
from tests.conftest import RunningPicker


def named(model: str) -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()


def assert_unknown(pick: pb.PickResponse, model: str) -> None:
    assert pick.outcome == pb.PickResponse.NO_WORKERS and not pick.response_id
    # Cut, and still longer than any model a policy may name (never taken for one).
    assert len(pick.requested_model) == MAX_MODEL_CHARS + 1
    assert model.startswith(pick.requested_model)
    assert len(pick.reason) <= 1024


async def test_a_pick_on_push_naming_a_long_model_is_answered(picker: RunningPicker) -> None:
    model = "m" * (16 << 10)
    request = pb.PickRequest(client_request_id="long")
    _, picked = await picker.client.push_and_pick(split_chunks(named(model)), request)
    assert picked is not None  # RESOURCE_EXHAUSTED before (trailing metadata too large)
    assert_unknown(picked[0], model)


async def test_a_pick_naming_a_long_model_is_answered_cut(picker: RunningPicker) -> None:
    model = "é" * (64 << 10)
    pushed = await picker.client.push(split_chunks(named(model)))
    assert_unknown(await picker.client.pick(pushed.stream_id), model)
